//! Git intake under a flood, in this process (release build), on SQLite and, in the same run,
//! on PostgreSQL when `BULKHEAD_TEST_POSTGRES_URL` is set:
//!
//! 1. **Intake latency, closed loop.** 64 clients post signed `push` deliveries as fast as
//!    they are answered (each a new push to one of 20 bound repositories, so every one is
//!    stored and then deployed while the flood goes on), 1,000 and then 5,000 in all. The
//!    baseline in the same run: the same flood of signed `ping` deliveries (the installation
//!    read and the signature checked, nothing stored) and of `GET /healthz`.
//! 2. **Intake latency, open loop.** Deliveries sent at a fixed rate (100/s and 400/s, 2,000
//!    each), whatever the answers; a latency is counted from the moment a delivery was due,
//!    so that a server falling behind shows (no coordinated omission). Pushes are sent twice:
//!    with the pipeline paused (stored only: the intake's own cost) and running (each push
//!    deployed while the flood goes on). Baseline: signed `ping` deliveries at the same rate.
//! 3. **Backlog drain.** With the deploy pipeline paused, 200 and then 2,000 pushes are
//!    delivered; the pipeline resumes and the time until every delivery made its deployment
//!    is measured. The baseline: the same number of deployments made through the API
//!    (`POST …/deployments`, one client).
//!
//! Run: `cargo bench -p bulkhead-api --bench intake` (`-- flood paced` and so on for
//! some of `flood`, `paced` and `drain`).

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
/// Deliveries of each open-loop run.
const PACED: usize = 2_000;

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

async fn server_start(
    dir: &std::path::Path,
    database_url: Option<String>,
) -> bulkhead::server::RunningServer {
    // SAFETY: set before any other thread of this program reads the environment.
    unsafe { std::env::set_var("BULKHEAD_BOOTSTRAP_TOKEN", TOKEN) };
    let settings = Settings::resolve(ServeArgs {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        data_dir: Some(dir.to_path_buf()),
        database_url,
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

/// Where a flood's requests go, cheap to clone into each client.
#[derive(Clone)]
struct Target {
    http: reqwest::Client,
    base: String,
    installation: String,
    secret: String,
}

impl Fixture {
    fn target(&self) -> Target {
        Target {
            http: self.api.http.clone(),
            base: self.api.base.clone(),
            installation: self.installation.clone(),
            secret: self.secret.clone(),
        }
    }
}

impl Target {
    /// Sends request `n` of its kind (a delivery numbered `n`) and reads the whole answer,
    /// which must be a success.
    async fn send(&self, request: Request, n: usize) {
        let builder = match request {
            Request::Healthz => self.http.get(format!("{}/healthz", self.base)),
            Request::Push | Request::Ping => {
                let (event, body) = match request {
                    Request::Push => ("push", push_body(n)),
                    _ => ("ping", format!("{{\"zen\":\"{n}\"}}").into_bytes()),
                };
                self.http
                    .post(format!(
                        "{}/v1/hooks/github?installation={}",
                        self.base, self.installation
                    ))
                    .header("content-type", "application/json")
                    .header("x-github-event", event)
                    .header("x-github-delivery", format!("bench-{n}"))
                    .header("x-hub-signature-256", signature(&self.secret, &body))
                    .body(body)
            }
        };
        let response = builder.send().await.unwrap();
        let status = response.status();
        response.bytes().await.unwrap();
        assert!(status.is_success(), "{status}");
    }
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
        let target = fixture.target();
        clients.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= end {
                    return latencies;
                }
                let sent = Instant::now();
                target.send(request, n).await;
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

/// `total` requests sent at `rate` a second whatever the answers (open loop); each request's
/// latency counted from the moment it was due, so that a server falling behind shows.
async fn paced(
    fixture: &Fixture,
    request: Request,
    total: usize,
    rate: u32,
    first: usize,
) -> (Vec<Duration>, Duration) {
    let started = tokio::time::Instant::now();
    let mut sent = Vec::with_capacity(total);
    for i in 0..total {
        let due = started + Duration::from_secs_f64(i as f64 / f64::from(rate));
        tokio::time::sleep_until(due).await;
        let target = fixture.target();
        sent.push(tokio::spawn(async move {
            target.send(request, first + i).await;
            due.elapsed()
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    for request in sent {
        latencies.push(request.await.unwrap());
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

/// Which measurements to run: those named on the command line, or all.
struct Only(Vec<String>);

impl Only {
    fn runs(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|only| only == name)
    }
}

/// The measurements against one server on `database_url` (SQLite when `None`).
async fn run(label: &str, database_url: Option<String>, only: &Only) {
    let dir = tempfile::tempdir().unwrap();
    let server = server_start(dir.path(), database_url).await;
    let fixture = fixture(&server).await;
    // Warm up the connections and the caches.
    flood(&fixture, Request::Ping, 500, 0).await;
    // Deliveries are numbered apart from the warm-up's.
    let mut first = 1_000_000;
    if only.runs("flood") {
        first = closed_loop(label, &fixture, first).await;
    }
    if only.runs("paced") {
        first = open_loop(label, &fixture, &server.app, first).await;
    }
    if only.runs("drain") {
        backlog_drain(label, &fixture, &server.app, first).await;
    }
    server.shutdown().await.unwrap();
}

/// Intake latency, closed loop; returns the next delivery number.
async fn closed_loop(label: &str, fixture: &Fixture, mut first: usize) -> usize {
    println!("\n{label}: intake under a flood ({CLIENTS} clients, closed loop)\n");
    println!("| request | count | throughput | p50 | p99 | p99 vs signed ping |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for total in [1_000, 5_000] {
        let (latencies, wall) = flood(fixture, Request::Healthz, total, 0).await;
        row("`GET /healthz`", latencies, wall, None);
        let (latencies, wall) = flood(fixture, Request::Ping, total, first).await;
        first += total;
        let ping = row("signed `ping` (nothing stored)", latencies, wall, None);
        let (latencies, wall) = flood(fixture, Request::Push, total, first).await;
        first += total;
        row(
            "signed `push` (stored, then deployed)",
            latencies,
            wall,
            Some(ping),
        );
    }

    first
}

/// Intake latency, open loop; returns the next delivery number.
async fn open_loop(
    label: &str,
    fixture: &Fixture,
    app: &bulkhead::app::App,
    mut first: usize,
) -> usize {
    println!("\n{label}: intake at a fixed rate (open loop)\n");
    println!(
        "| offered | count | signed ping p50 | p99 | push, pipeline paused, p50 | p99 | push, deployed meanwhile, p50 | p99 | deployed push p99 vs ping p99 |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for rate in [100, 400] {
        drained(app, Instant::now()).await;
        let (pings, _) = paced(fixture, Request::Ping, PACED, rate, first).await;
        first += PACED;
        // Stored only: what the intake itself costs, with no deployment made meanwhile.
        pipeline(fixture, "pause").await;
        let (stored, _) = paced(fixture, Request::Push, PACED, rate, first).await;
        first += PACED;
        pipeline(fixture, "resume").await;
        drained(app, Instant::now()).await;
        let (deployed, _) = paced(fixture, Request::Push, PACED, rate, first).await;
        first += PACED;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let ping_p99 = percentile(pings.clone(), 99.0);
        let deployed_p99 = percentile(deployed.clone(), 99.0);
        println!(
            "| {rate}/s | {PACED} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} |",
            ms(median(pings)),
            ms(ping_p99),
            ms(median(stored.clone())),
            ms(percentile(stored, 99.0)),
            ms(median(deployed)),
            ms(deployed_p99),
            deployed_p99.as_secs_f64() / ping_p99.as_secs_f64(),
        );
    }

    first
}

/// The drain of a push backlog against as many deployments made through the API.
async fn backlog_drain(label: &str, fixture: &Fixture, app: &bulkhead::app::App, mut first: usize) {
    println!("\n{label}: backlog drain\n");
    println!("| backlog | drained in | per push | API deploys, same count | per deploy | ratio |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for backlog in [200, 2_000] {
        // Let the flood's deployments settle first.
        drained(app, Instant::now()).await;
        pipeline(fixture, "pause").await;
        flood(fixture, Request::Push, backlog, first).await;
        first += backlog;
        let started = Instant::now();
        pipeline(fixture, "resume").await;
        let drain = drained(app, started).await;
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
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let only = Only(
            std::env::args()
                .skip(1)
                .filter(|arg| !arg.starts_with('-'))
                .collect(),
        );
        run("SQLite", None, &only).await;
        match common::postgres_database().await {
            Some(url) => run("PostgreSQL", Some(url), &only).await,
            None => println!("\nPostgreSQL: skipped (set BULKHEAD_TEST_POSTGRES_URL)"),
        }
    });
}
