//! Slow and hostile clients at the connection level (issue 45): headers that never finish,
//! kept-alive connections left idle, and thousands of half-open connections from one address.
//! None of them stops the server answering another address: `/healthz`, a sign-in, a deploy.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{Backend, PASSWORD, TestServer, http_builder};

/// The flood: more half-open connections from one address than it may hold.
const FLOOD: usize = 1500;
const PER_ADDRESS: usize = 64;

/// A connection from `from` to the server that sends `head` and nothing more.
async fn half_open(server: &str, from: Ipv4Addr, head: &[u8]) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind((from, 0).into())?;
    let mut stream = socket.connect(server.parse().unwrap()).await?;
    stream.write_all(head).await?;
    Ok(stream)
}

/// Whether the server has closed `stream` (an end of file or a reset, after any answer).
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let read_to_end = async {
        let mut chunk = [0u8; 1024];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(wait, read_to_end).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_from_one_address_stop_nobody_else() {
    let s = TestServer::start_with(Backend::Sqlite, |settings| {
        settings.connections.max_per_address = PER_ADDRESS;
        settings.connections.header_read_timeout = Duration::from_secs(2);
    })
    .await
    .unwrap();
    let server = s.base.trim_start_matches("http://").to_owned();
    let project = s.project_with_service("flooded").await;
    let email = "bystander@example.com";
    s.user_create(email).await;

    // Headers that never finish, from 127.0.0.1.
    let slow_head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        // A connection the server closed at once may fail its write: it counts all the same.
        if let Ok(stream) = half_open(&server, Ipv4Addr::LOCALHOST, slow_head).await {
            flood.push(stream);
        }
    }

    // Another address is served as if nothing happened.
    let bystander = http_builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let health = bystander.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let signed_in = bystander
        .post(s.url("/v1/auth/login"))
        .json(&json!({ "email": email, "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 200);
    let deployed = bystander
        .post(s.url(&format!(
            "/v1/projects/{}/services/{}/deployments",
            project.id, project.service
        )))
        .bearer_auth(&project.owner)
        .send()
        .await
        .unwrap();
    assert_eq!(deployed.status(), 201, "{}", deployed.text().await.unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "served in {:?}",
        started.elapsed()
    );

    // The flood holds no more than its address may: the rest were closed at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut open = 0;
    for stream in &mut flood {
        if !closed_within(stream, Duration::from_millis(1)).await {
            open += 1;
        }
    }
    assert!(
        open <= PER_ADDRESS,
        "{open} of {FLOOD} half-open connections stay open"
    );

    // And those it holds are closed once the header-read timeout passes.
    let waited = Instant::now();
    for stream in &mut flood {
        assert!(
            closed_within(stream, Duration::from_secs(5)).await,
            "a half-open connection outlived the header-read timeout"
        );
    }
    assert!(
        waited.elapsed() < Duration::from_secs(5),
        "{:?}",
        waited.elapsed()
    );
    drop(flood);

    // A kept-alive connection left idle is closed after the same time.
    let mut idle = half_open(
        &server,
        Ipv4Addr::new(127, 0, 0, 3),
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = [0u8; 512];
    let read = idle.read(&mut answer).await.unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
    let idle_since = Instant::now();
    assert!(closed_within(&mut idle, Duration::from_secs(6)).await);
    let idled = idle_since.elapsed();
    assert!(
        idled >= Duration::from_millis(1500) && idled < Duration::from_secs(6),
        "closed after {idled:?}"
    );

    // The flood's address is served again once its connections are gone.
    let again = s.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(again.status, 200);
}
