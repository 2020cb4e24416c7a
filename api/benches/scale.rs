//! Platform scale: what the control plane costs as its instances grow. For each size (1,000,
//! 10,000 and 30,000 instances), a fresh `bulkhead serve` process (release build, SQLite, its own
//! data directory; a separate process so that its CPU and memory are its own) with the
//! bundled providers pointed at the local platform's simulators (gcp in this process, aws in
//! another, see below):
//!
//! - **Build**: size/2 services of 2 replicas (one on gcp, one on aws), health checked every
//!   10 s, each with one verified domain (so the routing table has a route per service), all
//!   deployed at once; the time until every instance is healthy and routed.
//! - **Idle**: the server's CPU (user + system, from `/proc/<pid>/stat`) over 30 s with every
//!   instance healthy and nothing else happening but its own checks, and its RSS.
//! - **Lists**: p50/p99 of the dashboard's main lists (projects, a project's services, a
//!   service's deployments and instances), 200 sequential requests each, beside `/healthz`.
//! - **Failure to routes**: 1,000 watchers on `/v1/routing-table/watch`; an instance of a
//!   service checked every 500 ms (one failure makes it unhealthy) starts answering 500, then
//!   200 again: the time from the switch until each watcher has the change that removes it
//!   (and restores it), p50/p99 over 10 rounds. It includes the detection (up to one interval
//!   plus the check) and the publication.
//!
//! Each simulated instance listens on a socket of its own, and this machine's hard limit of open
//! files is 20,000 a process (`ulimit -Hn`): so the aws simulator runs in a second process (this
//! benchmark started again with `--aws-simulator`, which prints how to reach it), and 30,000
//! instances are 15,000 listeners in each.
//!
//! Run: `cargo bench -p bulkhead-api --bench scale` (`-- 1000` for one size).

mod common;

use std::process::Child;
use std::time::{Duration, Instant};

use bulkhead::dev::DevPlatform;
use bulkhead::entity::domain;
use common::{Api, TOKEN, percentile};
use futures::StreamExt;
use sea_orm::{ConnectionTrait, EntityTrait};
use serde_json::{Value, json};

const SIZES: [usize; 3] = [1_000, 10_000, 30_000];
/// The argument that makes this program the aws simulator's process.
const AWS_SIMULATOR: &str = "--aws-simulator";
const WATCHERS: usize = 1000;
const ROUNDS: usize = 10;
const IDLE: Duration = Duration::from_secs(30);
const LIST_REQUESTS: usize = 200;
/// Requests of the build made at once.
const AT_ONCE: usize = 32;

/// A child process, killed (and reaped) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Server {
    child: Killed,
    base: String,
    database_url: String,
}

fn server_start(dir: &std::path::Path) -> Server {
    let data = dir.join(format!("server-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&data).unwrap();
    let (child, base) = common::serve_process(
        &[
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--data-dir".as_ref(),
            data.as_os_str(),
        ],
        &[
            ("BULKHEAD_BOOTSTRAP_TOKEN", TOKEN),
            ("BULKHEAD_DEPLOY_CONCURRENCY", "32"),
            ("BULKHEAD_DEPLOY_PROVIDER_RATE", "100000"),
            // Thousands of services in one project, past what one tenant may hold.
            ("BULKHEAD_LIMITS", "services_per_project=1000000"),
            // A thousand watchers from this one address.
            ("BULKHEAD_MAX_CONNECTIONS_PER_ADDRESS", "100000"),
            ("RUST_LOG", "error"),
        ],
    );
    Server {
        child: Killed(child),
        base,
        database_url: format!("sqlite://{}?mode=rwc", data.join("bulkhead.db").display()),
    }
}

/// CPU seconds (user + system) the process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command (which may hold spaces) start after its `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // CLK_TCK is 100 on Linux.
    ticks / 100.0
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// Points gcp at this process's simulator and aws at the other process's.
async fn providers_configure(api: &Api, platform: &DevPlatform, aws: &AwsProcess) {
    let gcp = platform
        .provider_updates()
        .into_iter()
        .find(|(name, _)| *name == "gcp")
        .map(|(_, update)| serde_json::to_value(update).unwrap())
        .unwrap();
    for (name, update) in [("gcp", gcp), ("aws", aws.update.clone())] {
        api.call(
            reqwest::Method::PATCH,
            &format!("/v1/providers/{name}"),
            Some(update),
        )
        .await;
        let started = Instant::now();
        loop {
            let probe = api
                .http
                .post(format!("{}/v1/providers/{name}/probe", api.base))
                .bearer_auth(TOKEN)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            let state = api
                .call(reqwest::Method::GET, &format!("/v1/providers/{name}"), None)
                .await;
            if probe.status().is_success() && state["state"] == "healthy" {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{name} never healthy"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The routing table's revision and how many upstreams it routes to.
async fn table_upstreams(api: &Api) -> (i64, usize) {
    let table = api
        .call(reqwest::Method::GET, "/v1/routing-table", None)
        .await;
    let upstreams = table["table"]["routes"]
        .as_array()
        .map(|routes| {
            routes
                .iter()
                .map(|route| route["upstreams"].as_array().map_or(0, Vec::len))
                .sum()
        })
        .unwrap_or(0);
    (table["table"]["revision"].as_i64().unwrap_or(0), upstreams)
}

/// The aws simulator in a process of its own: the provider update that points at it.
struct AwsProcess {
    _child: Killed,
    update: Value,
}

/// Starts this program again as the aws simulator's process and reads its provider update.
fn aws_process_start() -> AwsProcess {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .arg(AWS_SIMULATOR)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the aws simulator's process starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let update = serde_json::from_str(&line).expect("the aws simulator's provider update");
    AwsProcess {
        _child: Killed(child),
        update,
    }
}

/// The aws simulator's process: a local platform whose aws provider update it prints, until
/// its parent closes its standard input.
async fn aws_simulator_serve() {
    let dir = tempfile::tempdir().unwrap();
    let platform = DevPlatform::start(dir.path()).await.unwrap();
    let (_, update) = platform
        .provider_updates()
        .into_iter()
        .find(|(name, _)| *name == "aws")
        .unwrap();
    println!("{}", serde_json::to_string(&update).unwrap());
    let _ =
        tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()))
            .await;
    platform.shutdown().await;
}

struct Built {
    project: String,
    /// The key of an instance (on gcp, whose simulator is in this process) of the service
    /// checked every 500 ms.
    probe_instance: String,
    some_service: String,
}

/// `size` instances: size/2 services of 2, plus the probed service (2 more), each routed.
async fn platform_build(api: &Api, server: &Server, size: usize) -> Built {
    let (project, environment) = api.project().await;
    let spec = |name: String, health: Value| {
        json!({
            "name": name,
            "source": { "type": "artifact", "image": "shop/web:1" },
            "port": 8080,
            "replicas": 2,
            "placement": { "providers": [{ "name": "gcp" }, { "name": "aws" }] },
            "health_check": health,
        })
    };
    let probe_service = api
        .service(
            &project,
            &environment,
            spec(
                "probed".into(),
                json!({ "interval_ms": 500, "timeout_ms": 400, "unhealthy_threshold": 1, "healthy_threshold": 1 }),
            ),
        )
        .await;
    let mut services: Vec<String> = futures::stream::iter(0..size / 2)
        .map(|n| {
            let (project, environment) = (&project, &environment);
            async move {
                api.service(
                    project,
                    environment,
                    spec(format!("web-{n}"), json!({ "interval_ms": 10_000 })),
                )
                .await
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    services.push(probe_service.clone());
    // One verified domain per service.
    let db = sea_orm::Database::connect(&server.database_url)
        .await
        .unwrap();
    let project_id: uuid::Uuid = project.rsplit('/').next().unwrap().parse().unwrap();
    let rows: Vec<domain::ActiveModel> = services
        .iter()
        .enumerate()
        .map(|(n, service)| {
            let service_id = service.rsplit('/').next().unwrap().parse().unwrap();
            common::verified_domain(project_id, service_id, format!("s{n}.scale.test"))
        })
        .collect();
    for chunk in rows.chunks(500) {
        domain::Entity::insert_many(chunk.to_vec())
            .exec(&db)
            .await
            .unwrap();
    }
    db.execute_unprepared("PRAGMA wal_checkpoint(PASSIVE)")
        .await
        .unwrap();
    drop(db);
    let started = Instant::now();
    let _: Vec<String> = futures::stream::iter(services.iter())
        .map(|service| api.deploy(service))
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    let total = 2 * services.len();
    loop {
        let (_, upstreams) = table_upstreams(api).await;
        if upstreams == total {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "{upstreams} of {total} instances routed after 20 min"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "  built: {} services, {total} instances healthy and routed {:.1} s after the deploys were asked ({:.0} instances/s)",
        services.len(),
        started.elapsed().as_secs_f64(),
        total as f64 / started.elapsed().as_secs_f64()
    );
    let instances = api
        .call(
            reqwest::Method::GET,
            &format!("{probe_service}/instances"),
            None,
        )
        .await;
    let running = instances["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["state"] == "running" && i["provider"] == "gcp")
        .expect("a running instance on gcp");
    let probe_instance = running["instance_key"].as_str().unwrap().to_owned();
    Built {
        project,
        probe_instance,
        some_service: services[0].clone(),
    }
}

async fn idle(server: &Server) -> (f64, f64) {
    let pid = server.child.0.id();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = cpu_seconds(pid);
    tokio::time::sleep(IDLE).await;
    let used = cpu_seconds(pid) - before;
    (used / IDLE.as_secs_f64(), rss_mib(pid))
}

async fn lists(api: &Api, built: &Built) -> Vec<(String, Duration, Duration)> {
    let paths = [
        "/healthz".to_owned(),
        "/v1/projects?limit=50".to_owned(),
        format!("{}/services?limit=50", built.project),
        format!("{}/services?limit=200", built.project),
        format!("{}/deployments", built.some_service),
        format!("{}/instances", built.some_service),
    ];
    let mut rows = Vec::new();
    for path in paths {
        let mut samples = Vec::with_capacity(LIST_REQUESTS);
        for _ in 0..LIST_REQUESTS {
            let started = Instant::now();
            let response = api
                .http
                .get(format!("{}{path}", api.base))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success(), "{path}");
            response.bytes().await.unwrap();
            samples.push(started.elapsed());
        }
        rows.push((
            path.replace(&built.some_service, "{service}")
                .replace(&built.project, "{project}"),
            percentile(samples.clone(), 50.0),
            percentile(samples, 99.0),
        ));
    }
    rows
}

async fn failure_to_routes(api: &Api, platform: &DevPlatform, built: &Built) -> Vec<Duration> {
    let (revision, _) = table_upstreams(api).await;
    let (arrivals, watchers) = common::watchers_open(&api.base, revision, WATCHERS).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut samples = Vec::new();
    for round in 0..ROUNDS {
        for status in [
            reqwest::StatusCode::INTERNAL_SERVER_ERROR,
            reqwest::StatusCode::OK,
        ] {
            // Only the probed instance changes: the next revision any watcher sees is its.
            let before = arrivals
                .iter()
                .filter_map(|a| a.lock().unwrap().last().map(|(r, _)| *r))
                .max()
                .unwrap_or(revision);
            let started = Instant::now();
            let key = &built.probe_instance;
            assert!(platform.gcp.instance_answer_with(key, status), "{key}");
            for arrived in &arrivals {
                let at = loop {
                    let seen = arrived
                        .lock()
                        .unwrap()
                        .iter()
                        .find(|(r, _)| *r > before)
                        .map(|(_, at)| *at);
                    if let Some(at) = seen {
                        break at;
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "round {round}: a watcher never saw the change after {before}"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                samples.push(at.duration_since(started));
            }
        }
    }
    for watcher in watchers {
        watcher.abort();
    }
    samples
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == AWS_SIMULATOR) {
        return aws_simulator_serve().await;
    }
    let only: Option<usize> = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok());
    println!(
        "machine: {} cores; date: {}",
        std::thread::available_parallelism().unwrap(),
        chrono::Utc::now().format("%Y-%m-%d")
    );
    let mut summary = Vec::new();
    for size in SIZES.into_iter().filter(|s| only.is_none_or(|o| o == *s)) {
        println!("{size} instances:");
        let dir = tempfile::tempdir().unwrap();
        let platform = DevPlatform::start(dir.path()).await.unwrap();
        let aws = aws_process_start();
        let server = server_start(dir.path());
        let api = Api {
            http: common::http(),
            base: server.base.clone(),
        };
        let empty_cpu_rss = idle(&server).await;
        providers_configure(&api, &platform, &aws).await;
        let built = platform_build(&api, &server, size).await;
        let (cpu, rss) = idle(&server).await;
        println!(
            "  idle: {:.3} of a core, RSS {rss:.0} MiB (empty server before the build: {:.3}, {:.0} MiB)",
            cpu, empty_cpu_rss.0, empty_cpu_rss.1
        );
        let listed = lists(&api, &built).await;
        for (path, p50, p99) in &listed {
            println!("  GET {path}: p50 {p50:?}, p99 {p99:?}");
        }
        let samples = failure_to_routes(&api, &platform, &built).await;
        let (p50, p99) = (
            percentile(samples.clone(), 50.0),
            percentile(samples.clone(), 99.0),
        );
        println!(
            "  instance fails or recovers → every one of {WATCHERS} watchers has the change, {ROUNDS} rounds each way, {} samples: p50 {p50:?}, p99 {p99:?}, max {:?}",
            samples.len(),
            percentile(samples, 100.0)
        );
        summary.push((size, cpu, rss, listed, p50, p99));
        drop(server);
        drop(aws);
        platform.shutdown().await;
    }
    println!();
    println!(
        "| instances | idle CPU (cores) | RSS (MiB) | services list p50 / p99 | `/healthz` p50 | failure → all watchers p50 / p99 |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for (size, cpu, rss, listed, p50, p99) in summary {
        let services = listed
            .iter()
            .find(|(path, _, _)| path.ends_with("services?limit=50"))
            .unwrap();
        println!(
            "| {size} | {cpu:.3} | {rss:.0} | {:.2} / {:.2} ms | {:.2} ms | {:.0} / {:.0} ms |",
            services.1.as_secs_f64() * 1000.0,
            services.2.as_secs_f64() * 1000.0,
            listed[0].1.as_secs_f64() * 1000.0,
            p50.as_secs_f64() * 1000.0,
            p99.as_secs_f64() * 1000.0
        );
    }
}
