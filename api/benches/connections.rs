//! `/healthz` for a client of its own while another address floods the server with half-open
//! connections (headers that never finish: the slowloris attack), release build, SQLite.
//!
//! A server process (`bulkhead serve`, or the binary in `BULKHEAD_BENCH_BIN`, to measure an
//! earlier build beside this one) is flooded from 127.0.0.1 with 0, 2,000 and then 10,000
//! connections that each send `GET /healthz HTTP/1.1\r\nHost: x\r\n` and stop; the flood
//! opens a new one whenever the server closes one. Meanwhile a client on 127.0.0.2 asks for
//! `/healthz` 1,000 times, each on a new connection (what a new visitor does): p50, p99 and
//! failures, and p99 as a ratio to the unflooded p99 of the same run.
//!
//! Run: `cargo bench -p bulkhead-api --bench connections`.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::percentile;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

const FLOODS: [usize; 3] = [0, 2_000, 10_000];
const REQUESTS: usize = 1_000;
const SLOW_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn half_open(server: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind((Ipv4Addr::LOCALHOST, 0).into()).ok()?;
    let mut stream = tokio::time::timeout(Duration::from_secs(2), socket.connect(server))
        .await
        .ok()?
        .ok()?;
    stream.write_all(SLOW_HEAD).await.ok()?;
    Some(stream)
}

/// Keeps `size` half-open connections to `server` until `stop`: whenever the server has closed
/// one, another is opened.
async fn flood(server: SocketAddr, size: usize, stop: Arc<AtomicBool>) {
    let mut held: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    while !stop.load(Ordering::Relaxed) {
        for slot in held.iter_mut() {
            let closed = match slot {
                None => true,
                Some(stream) => {
                    // Still waiting: no answer, no end. Anything else (an end, a reset, an
                    // answer) means the server is done with it.
                    let mut byte = [0u8; 1];
                    !matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                }
            };
            if closed {
                *slot = half_open(server).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let binary = std::env::var("BULKHEAD_BENCH_BIN").ok();
    let (child, base) = common::serve_process_of(
        binary.as_deref(),
        &[
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--data-dir".as_ref(),
            dir.path().as_os_str(),
        ],
        &[
            ("BULKHEAD_BOOTSTRAP_TOKEN", common::TOKEN),
            ("RUST_LOG", "error"),
        ],
    );
    let _child = Killed(child);
    let server: SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let bystander = common::http_builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    println!("server: {}", binary.as_deref().unwrap_or("this build"));
    println!("| half-open connections | p50 | p99 | failed | p99 / unflooded p99 |");
    println!("| --- | --- | --- | --- | --- |");
    let mut unflooded = None;
    for size in FLOODS {
        let stop = Arc::new(AtomicBool::new(false));
        let flooding = tokio::spawn(flood(server, size, stop.clone()));
        // Let the flood reach its size.
        tokio::time::sleep(Duration::from_secs(if size == 0 { 1 } else { 5 })).await;
        let mut samples = Vec::with_capacity(REQUESTS);
        let mut failed = 0;
        for _ in 0..REQUESTS {
            let started = Instant::now();
            match bystander.get(format!("{base}/healthz")).send().await {
                Ok(answer) if answer.status() == 200 => samples.push(started.elapsed()),
                _ => {
                    failed += 1;
                    samples.push(started.elapsed());
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        flooding.await.unwrap();
        let (p50, p99) = (percentile(samples.clone(), 50.0), percentile(samples, 99.0));
        let baseline = *unflooded.get_or_insert(p99);
        println!(
            "| {size} | {:.2} ms | {:.2} ms | {failed} of {REQUESTS} | {:.2}× |",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            p99.as_secs_f64() / baseline.as_secs_f64()
        );
        // The server closes what is left of the flood before the next size.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
