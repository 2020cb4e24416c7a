//! HTTPS at the edge, at 10 and 1,000 domains: a real Caddy driven by the edge agent, its
//! certificates from a real ACME CA (Pebble, `apt-get install pebble`), the routes to a small
//! upstream in this process (so that the proxy, not the workload, is measured). The edge reads
//! a signed snapshot from a file (one of its sources), written here with a key it trusts.
//!
//! 1. **A new domain to its first HTTPS answer**: a revision adds one domain; the time until
//!    `GET https://<domain>/` answers 200 over a new connection: the edge reads the table,
//!    loads Caddy, Caddy asks the agent and obtains the certificate from the CA (HTTP-01 or
//!    TLS-ALPN-01 validation included). Ten domains in a row, at each size.
//! 2. **Requests a second**, over HTTPS and over plain HTTP through the same Caddy (the edge
//!    restarted with `--plain-http` for the latter): kept-alive connections, and a new
//!    connection (a new TLS handshake) per request; 32 clients in this process, 10 s each,
//!    spread over 20 of the table's domains (Caddy paces issuance per CA account: all 1,000
//!    would take over 10 minutes).
//!
//! Run: `cargo bench -p bulkhead-api --bench edge_https`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use bulkhead::dev::acme::AcmeCa;
use bulkhead::dev::caddy::{CaddyProcess, free_port};
use bulkhead_edge::EdgeSettings;
use bulkhead_edge::certificates::EdgeTls;
use bulkhead_edge::sync::Source;
use bulkhead_routing::{Route, RoutingTable, SignedSnapshot, Upstream, key_id_of};
use ed25519_dalek::SigningKey;
use futures::StreamExt;

const SIZES: [usize; 2] = [10, 1000];
const NEW_DOMAINS: usize = 10;
/// The domains the load goes to (with the new ones): each with its certificate.
const LOADED: usize = 10;
const CLIENTS: usize = 32;
const LOAD_SECS: u64 = 10;

#[tokio::main]
async fn main() {
    bulkhead_common::tls::crypto_provider_install();
    println!(
        "machine: {} cores; date: {}",
        std::thread::available_parallelism().unwrap(),
        chrono::Utc::now().format("%Y-%m-%d")
    );
    let upstream = upstream_start().await;
    for size in SIZES {
        size_run(size, upstream).await;
    }
}

/// A small HTTP server answering `GET /` with 200 and a few bytes.
async fn upstream_start() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello\n" }));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

struct Snapshots {
    key: SigningKey,
    file: PathBuf,
    upstream: SocketAddr,
    revision: i64,
    domains: Vec<String>,
}

impl Snapshots {
    /// Writes the next revision, routing every domain to the upstream.
    fn publish(&mut self) {
        self.revision += 1;
        let mut domains = self.domains.clone();
        domains.sort();
        let table = RoutingTable {
            revision: self.revision,
            generated_at: chrono::Utc::now(),
            drop_intended: false,
            routes: domains
                .iter()
                .map(|domain| Route {
                    domain: domain.clone(),
                    project_id: uuid::Uuid::nil(),
                    service_id: uuid::Uuid::nil(),
                    upstreams: vec![Upstream {
                        address: self.upstream.to_string(),
                        provider: "metal".into(),
                        region: "local".into(),
                        instance_key: "upstream-1".into(),
                        weight: 1,
                    }],
                })
                .collect(),
        };
        let document = SignedSnapshot::sign(&table, &self.key);
        let temporary = self.file.with_extension("tmp");
        std::fs::write(&temporary, document).unwrap();
        std::fs::rename(&temporary, &self.file).unwrap();
    }
}

async fn size_run(size: usize, upstream: SocketAddr) {
    // Kept when a step fails, with Caddy's and Pebble's logs.
    let dir = tempfile::tempdir().unwrap().keep();
    // A key of the bench's own, as the edge tests make theirs: the edge trusts it alone.
    let key = SigningKey::from_bytes(&[7; 32]);
    let public = key.verifying_key();
    let keys = serde_json::json!({ "keys": [{
        "id": key_id_of(&public),
        "public_key": base64::engine::general_purpose::STANDARD.encode(public.as_bytes()),
        "state": "active",
        "created_at": chrono::Utc::now(),
        "activated_at": chrono::Utc::now(),
        "retired_at": null,
    }]});
    std::fs::write(dir.join("trusted-keys.json"), keys.to_string()).unwrap();
    let mut snapshots = Snapshots {
        key,
        file: dir.join("snapshot.json"),
        upstream,
        revision: 0,
        domains: (0..size).map(|n| format!("d{n}.bench.test")).collect(),
    };
    snapshots.publish();

    let ports = (free_port().unwrap(), free_port().unwrap());
    let ca = AcmeCa::start(&dir.join("pebble"), ports.0, ports.1)
        .await
        .unwrap();
    let root = ca.issuing_root().await.unwrap();
    let caddy =
        CaddyProcess::start(Path::new("caddy"), &dir.join("caddy"), free_port().unwrap()).unwrap();
    caddy.ready().await.unwrap();
    let tls = EdgeTls::resolve(
        format!("127.0.0.1:{}", ports.1),
        &ca.directory(),
        None,
        vec![ca.server_root()],
        dir.join("edge-state").join("certificates"),
    )
    .unwrap();
    let settings = EdgeSettings {
        id: "bench-edge".into(),
        sources: vec![Source::File(snapshots.file.clone())],
        token: None,
        trusted_keys: dir.join("trusted-keys.json"),
        ca_file: None,
        state_dir: dir.join("edge-state"),
        caddy_admin: caddy.admin(),
        caddy_listen: format!("127.0.0.1:{}", ports.0),
        tls: Some(tls),
        listen: "127.0.0.1:0".parse().unwrap(),
        max_drop: 0.5,
        poll_interval: Duration::from_millis(50),
        stale_after: Duration::from_secs(300),
    };
    let edge = bulkhead_edge::start(settings.clone()).await.unwrap();
    let https = Target {
        scheme: "https",
        port: ports.1,
        root: Some(root.clone()),
    };

    // The certificates of the domains the load goes to, first (Caddy paces issuance per CA
    // account: all 1,000 would take over 10 minutes).
    let started = Instant::now();
    let mut loaded: Vec<String> = snapshots.domains.iter().take(LOADED).cloned().collect();
    futures::stream::iter(loaded.iter())
        .for_each_concurrent(16, |domain| first_answer(&https, domain))
        .await;
    println!(
        "{size} domains: {} certificates obtained and answering in {:.1} s",
        loaded.len(),
        started.elapsed().as_secs_f64()
    );

    // A new domain to its first HTTPS answer, once Caddy's pacing of the first ones is over.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let mut samples = Vec::new();
    for n in 0..NEW_DOMAINS {
        let domain = format!("new{n}.bench.test");
        snapshots.domains.push(domain.clone());
        loaded.push(domain.clone());
        let started = Instant::now();
        snapshots.publish();
        first_answer(&https, &domain).await;
        samples.push(started.elapsed());
    }
    samples.sort();
    println!(
        "{size} domains: new domain → first HTTPS answer: p50 {:.0} ms, max {:.0} ms ({NEW_DOMAINS} domains)",
        samples[samples.len() / 2].as_secs_f64() * 1000.0,
        samples.last().unwrap().as_secs_f64() * 1000.0
    );

    let domains = loaded;
    let https_kept = load(&https, &domains, true).await;
    let https_new = load(&https, &domains, false).await;
    edge.shutdown().await;
    let plain = bulkhead_edge::start(EdgeSettings {
        tls: None,
        ..settings
    })
    .await
    .unwrap();
    let http = Target {
        scheme: "http",
        port: ports.0,
        root: None,
    };
    first_answer(&http, &domains[0]).await;
    let http_kept = load(&http, &domains, true).await;
    let http_new = load(&http, &domains, false).await;
    println!(
        "{size} domains: kept-alive HTTPS {https_kept:.0}/s, HTTP {http_kept:.0}/s, ratio {:.2}",
        https_kept / http_kept
    );
    println!(
        "{size} domains: new connections HTTPS {https_new:.0}/s, HTTP {http_new:.0}/s, ratio {:.2}",
        https_new / http_new
    );
    plain.shutdown().await;
    drop(caddy);
    drop(ca);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where the edge serves: a scheme and a port of 127.0.0.1, and the root HTTPS chains to.
struct Target {
    scheme: &'static str,
    port: u16,
    root: Option<PathBuf>,
}

impl Target {
    fn client(&self, domains: &[String], kept_alive: bool) -> reqwest::Client {
        let mut builder = bulkhead_common::tls::http_client_builder(self.root.as_deref())
            .unwrap()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30));
        for domain in domains {
            builder = builder.resolve(domain, SocketAddr::from(([127, 0, 0, 1], self.port)));
        }
        if !kept_alive {
            builder = builder.pool_max_idle_per_host(0);
        }
        builder.build().unwrap()
    }

    fn url(&self, domain: &str) -> String {
        format!("{}://{domain}:{}/", self.scheme, self.port)
    }
}

/// Waits until `domain` answers 200 on a new connection.
async fn first_answer(target: &Target, domain: &str) {
    let client = target.client(&[domain.to_owned()], false);
    let started = Instant::now();
    loop {
        if let Ok(response) = client.get(target.url(domain)).send().await
            && response.status() == 200
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{domain} does not answer: {:?}",
            client.get(target.url(domain)).send().await
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Requests a second from [`CLIENTS`] clients over [`LOAD_SECS`], each request to the next
/// domain; every answer must be 200.
async fn load(target: &Target, domains: &[String], kept_alive: bool) -> f64 {
    let client = target.client(domains, kept_alive);
    let urls: Arc<Vec<String>> = Arc::new(domains.iter().map(|d| target.url(d)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, urls, done, next, stop) = (
                client.clone(),
                urls.clone(),
                done.clone(),
                next.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let url = &urls[next.fetch_add(1, Ordering::Relaxed) % urls.len()];
                    let response = client.get(url).send().await.unwrap();
                    assert_eq!(response.status(), 200, "{url}");
                    response.bytes().await.unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(LOAD_SECS)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
