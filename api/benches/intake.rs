//! Git intake under a flood, in this process (release build), on SQLite:
//!
//! 1. **Intake latency.** 64 clients post signed `push` deliveries as fast as they are
//!    answered (each a new push to one of 20 bound repositories, so every one is stored and
//!    then deployed while the flood goes on), 1,000 and then 5,000 in all. The baseline in the
//!    same run: the same flood of signed `ping` deliveries (the installation read and the
//!    signature checked, nothing stored) and of `GET /healthz`.
//! 2. **Backlog drain.** With the deploy pipeline paused, 200 and then 2,000 pushes are
//!    delivered; the pipeline resumes and the time until every delivery made its deployment
//!    is measured. The baseline: the same number of deployments made through the API
//!    (`POST …/deployments`, one client).
//!
//! Run: `cargo bench -p bulkhead-api --bench intake`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkhead::config::{ServeArgs, Settings};
use common::{Api, TOKEN, median, percentile};
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

const CLIENTS: usize = 64;
const REPOSITORIES: usize = 20;

struct Fixture {
    api: Api,
    installation: String,
    secret: String,
    services: Vec<String>,
}

fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn push_body(n: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "ref": "refs/heads/main",
        "before": "0".repeat(40),
        "after": format!("{n:040x}"),
        "repository": { "full_name": format!("acme/repo{}", n % REPOSITORIES), "pushed_at": chrono::Utc::now().timestamp() },
        "pusher": { "name": "octocat" },
        "head_commit": { "id": format!("{n:040x}"), "message": format!("commit {n}") },
        "commits": [],
    }))
    .unwrap()
}

async fn server_start(dir: &std::path::Path) -> bulkhead::server::RunningServer {
    // SAFETY: set before any other thread of this program reads the environment.
    unsafe { std::env::set_var("BULKHEAD_BOOTSTRAP_TOKEN", TOKEN) };
    let settings = Settings::resolve(ServeArgs {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        data_dir: Some(dir.to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    bulkhead::server::start(settings).await.unwrap()
}

async fn fixture(server: &bulkhead::server::RunningServer) -> Fixture {
    let api = Api {
        http: common::http_builder()
            .pool_max_idle_per_host(CLIENTS)
            .build()
            .unwrap(),
        base: format!("http://{}", server.addr),
    };
    let (project, environment) = api.project().await;
    let mut services = Vec::new();
    let mut bindings = Vec::new();
    for n in 0..REPOSITORIES {
        let service = api
            .service(
                &project,
                &environment,
                json!({ "name": format!("svc{n}"), "source": { "type": "artifact", "image": "shop/web:1" }, "port": 8080 }),
            )
            .await;
        let id = service.rsplit('/').next().unwrap().to_owned();
        bindings.push(
            json!({ "repository": format!("acme/repo{n}"), "branch": "main", "service_id": id }),
        );
        services.push(service);
    }
    let installation = api
        .call(
            reqwest::Method::POST,
            &format!("{project}/git-installations"),
            Some(json!({ "bindings": bindings })),
        )
        .await;
    Fixture {
        api,
        installation: installation["id"].as_str().unwrap().to_owned(),
        secret: installation["secret"].as_str().unwrap().to_owned(),
        services,
    }
}

/// What one request of a flood is.
#[derive(Clone, Copy)]
enum Request {
    Push,
    Ping,
    Healthz,
}

/// `total` requests from [`CLIENTS`] clients; each request's latency, and the wall time.
async fn flood(
    fixture: &Fixture,
    request: Request,
    total: usize,
    first: usize,
) -> (Vec<Duration>, Duration) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(first));
    let end = first + total;
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let next = next.clone();
        let http = fixture.api.http.clone();
        let base = fixture.api.base.clone();
        let installation = fixture.installation.clone();
        let secret = fixture.secret.clone();
        clients.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= end {
                    return latencies;
                }
                let builder = match request {
                    Request::Healthz => http.get(format!("{base}/healthz")),
                    Request::Push | Request::Ping => {
                        let (event, body) = match request {
                            Request::Push => ("push", push_body(n)),
                            _ => ("ping", format!("{{\"zen\":\"{n}\"}}").into_bytes()),
                        };
                        http.post(format!(
                            "{base}/v1/hooks/github?installation={installation}"
                        ))
                        .header("content-type", "application/json")
                        .header("x-github-event", event)
                        .header("x-github-delivery", format!("bench-{n}"))
                        .header("x-hub-signature-256", signature(&secret, &body))
                        .body(body)
                    }
                };
                let sent = Instant::now();
                let response = builder.send().await.unwrap();
                let status = response.status();
                response.bytes().await.unwrap();
                assert!(status.is_success(), "{status}");
                latencies.push(sent.elapsed());
            }
        }));
    }
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await.unwrap());
    }
    (latencies, started.elapsed())
}

fn row(
    what: &str,
    latencies: Vec<Duration>,
    wall: Duration,
    baseline_p99: Option<Duration>,
) -> Duration {
    let count = latencies.len();
    let p50 = median(latencies.clone());
    let p99 = percentile(latencies, 99.0);
    let ratio = baseline_p99
        .map(|b| format!("{:.2}", p99.as_secs_f64() / b.as_secs_f64()))
        .unwrap_or_else(|| "1.00".into());
    println!(
        "| {what} | {count} | {:.0}/s | {:.2} ms | {:.2} ms | {ratio} |",
        count as f64 / wall.as_secs_f64(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
    );
    p99
}

/// Waits until no delivery is queued; returns the time since `started`.
async fn drained(app: &bulkhead::app::App, started: Instant) -> Duration {
    while app.git_deliveries_queued().await.unwrap() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

async fn pipeline(fixture: &Fixture, action: &str) {
    let body = (action == "pause").then(|| json!({ "reason": "bench" }));
    fixture
        .api
        .call(
            reqwest::Method::POST,
            &format!("/v1/deploy-pipeline/{action}"),
            body,
        )
        .await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let server = server_start(dir.path()).await;
        let fixture = fixture(&server).await;
        // Warm up the connections and the caches.
        flood(&fixture, Request::Ping, 500, 0).await;

        println!("\nIntake under a flood ({CLIENTS} clients)\n");
        println!("| request | count | throughput | p50 | p99 | p99 vs signed ping |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: |");
        let mut first = 1_000_000;
        for total in [1_000, 5_000] {
            let (latencies, wall) = flood(&fixture, Request::Healthz, total, 0).await;
            row("`GET /healthz`", latencies, wall, None);
            let (latencies, wall) = flood(&fixture, Request::Ping, total, first).await;
            first += total;
            let ping = row("signed `ping` (nothing stored)", latencies, wall, None);
            let (latencies, wall) = flood(&fixture, Request::Push, total, first).await;
            first += total;
            row(
                "signed `push` (stored, then deployed)",
                latencies,
                wall,
                Some(ping),
            );
        }

        println!("\nBacklog drain\n");
        println!(
            "| backlog | drained in | per push | API deploys, same count | per deploy | ratio |"
        );
        println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
        for backlog in [200, 2_000] {
            // Let the flood's deployments settle first.
            drained(&server.app, Instant::now()).await;
            pipeline(&fixture, "pause").await;
            flood(&fixture, Request::Push, backlog, first).await;
            first += backlog;
            let started = Instant::now();
            pipeline(&fixture, "resume").await;
            let drain = drained(&server.app, started).await;
            let started = Instant::now();
            for n in 0..backlog {
                fixture
                    .api
                    .deploy(&fixture.services[n % fixture.services.len()])
                    .await;
            }
            let api = started.elapsed();
            println!(
                "| {backlog} | {:.2} s | {:.2} ms | {:.2} s | {:.2} ms | {:.2} |",
                drain.as_secs_f64(),
                drain.as_secs_f64() * 1e3 / backlog as f64,
                api.as_secs_f64(),
                api.as_secs_f64() * 1e3 / backlog as f64,
                drain.as_secs_f64() / api.as_secs_f64(),
            );
        }
        server.shutdown().await.unwrap();
    });
}
