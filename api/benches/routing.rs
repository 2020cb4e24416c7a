//! Routing-table benchmarks on the local platform (`bulkhead::dev`), release build, SQLite:
//!
//! 1. **Throughput of a 10,000-route table**: 100 services of 2 replicas on gcp (the
//!    simulator), 100 domains each. `GET /v1/routing-table` (gzip, as edges fetch it) and the
//!    same with `If-None-Match` (304), with wrk, against nginx serving the same bytes (the
//!    document and its gzip, `gzip_static`) as a static file, in the same run: the ratios.
//! 2. **Propagation latency**: 1,000 watchers on `/v1/routing-table/watch`; one instance
//!    becomes healthy (recorded as the health checker records it); the time until each watcher
//!    has the change event of the revision that routes to it: p50 and p99 over 20 rounds.
//!
//! Needs nginx and wrk (Debian: `apt-get install nginx-light wrk`). Run:
//! `cargo bench -p bulkhead-api --bench routing` (`-- throughput` or `-- propagation` for one).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bulkhead::entity::instance::InstanceHealth;
use bulkhead::entity::{domain, instance};
use common::{Api, TOKEN, percentile};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::json;

const SERVICES: usize = 100;
const DOMAINS_PER_SERVICE: usize = 100;
const WATCHERS: usize = 1000;
const ROUNDS: usize = 20;
const WRK_SECS: u32 = 10;

#[tokio::main]
async fn main() {
    let which = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let dir = tempfile::tempdir().unwrap();
    let (platform, server) = common::platform_and_server(dir.path(), |settings| {
        settings.deploy.concurrency = 16;
    })
    .await;
    let api = Api {
        http: common::http(),
        base: format!("http://{}", server.addr),
    };
    routes_make(&api, &server.app).await;
    println!(
        "machine: {} cores; date: {}",
        std::thread::available_parallelism().unwrap(),
        chrono::Utc::now().format("%Y-%m-%d")
    );
    if which.as_deref().is_none_or(|w| w == "throughput") {
        throughput(&api, dir.path()).await;
    }
    if which.as_deref().is_none_or(|w| w == "propagation") {
        propagation(&api, &server.app).await;
    }
    server.shutdown().await.unwrap();
    platform.shutdown().await;
}

/// 100 services of 2 healthy replicas on gcp, each bound to 100 domains: 10,000 routes of 2
/// upstreams. The health checks run once a minute, so that only the benchmark changes health.
async fn routes_make(api: &Api, app: &bulkhead::app::App) {
    let started = Instant::now();
    let (project, environment) = api.project().await;
    let mut services = Vec::new();
    for n in 0..SERVICES {
        let service = api
            .service(
                &project,
                &environment,
                json!({
                    "name": format!("web-{n}"),
                    "source": { "type": "artifact", "image": "shop/web:1" },
                    "port": 8080,
                    "replicas": 2,
                    "placement": { "providers": [{ "name": "gcp" }] },
                    "health_check": { "path": "/", "interval_ms": 60000, "timeout_ms": 1000, "start_timeout_secs": 30 },
                }),
            )
            .await;
        services.push(service);
    }
    let deployments: Vec<(String, String)> = futures::future::join_all(
        services
            .iter()
            .map(|service| async move { (service.clone(), api.deploy(service).await) }),
    )
    .await;
    futures::future::join_all(
        deployments
            .iter()
            .map(|(service, id)| api.healthy_wait(service, id)),
    )
    .await;
    let project_id: uuid::Uuid = project.rsplit('/').next().unwrap().parse().unwrap();
    let rows: Vec<domain::ActiveModel> = services
        .iter()
        .enumerate()
        .flat_map(|(s, service)| {
            let service_id: uuid::Uuid = service.rsplit('/').next().unwrap().parse().unwrap();
            (0..DOMAINS_PER_SERVICE).map(move |d| {
                common::verified_domain(project_id, service_id, format!("d{d}.s{s}.bench.test"))
            })
        })
        .collect();
    for chunk in rows.chunks(500) {
        domain::Entity::insert_many(chunk.to_vec())
            .exec(&app.db)
            .await
            .unwrap();
    }
    app.routing_refresh().await.unwrap();
    let table = app.routing.current().unwrap().table();
    let prepared = app.routing.prepared().unwrap();
    assert_eq!(table.routes.len(), SERVICES * DOMAINS_PER_SERVICE);
    assert_eq!(table.upstream_count(), 2 * SERVICES * DOMAINS_PER_SERVICE);
    println!(
        "table: {} routes, {} upstreams; {} KiB signed; set up in {:?}",
        table.routes.len(),
        table.upstream_count(),
        prepared.identity.len() / 1024,
        started.elapsed()
    );
}

/// nginx serving `www/` on `port`.
fn nginx_start(dir: &Path, port: u16) -> Child {
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "daemon off; worker_processes 2; pid {dir}/nginx.pid; error_log {dir}/nginx-error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/tmp; proxy_temp_path {dir}/tmp; fastcgi_temp_path {dir}/tmp;
  uwsgi_temp_path {dir}/tmp; scgi_temp_path {dir}/tmp;
  server {{
    listen 127.0.0.1:{port};
    location = /v1/routing-table {{
      alias {dir}/www/table.json; default_type application/json; gzip_static on; etag on;
    }}
  }}
}}
",
            dir = dir.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    Command::new("nginx")
        .args(["-c"])
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx (apt-get install nginx-light)")
}

/// wrk's requests a second against `url`, with `headers`; panics on errors or non-2xx/304.
fn wrk(url: &str, headers: &[(&str, &str)]) -> f64 {
    let mut command = Command::new("wrk");
    command.args(["-t2", "-c64", &format!("-d{WRK_SECS}s")]);
    for (name, value) in headers {
        command.args(["-H", &format!("{name}: {value}")]);
    }
    let output = command
        .arg(url)
        .output()
        .expect("wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(!text.contains("Non-2xx"), "{url}: {text}");
    text.lines()
        .find_map(|line| line.strip_prefix("Requests/sec:"))
        .and_then(|rps| rps.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rate from wrk: {text}"))
}

async fn throughput(api: &Api, dir: &Path) {
    let response = api
        .http
        .get(format!("{}/v1/routing-table", api.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    let document = response.bytes().await.unwrap();
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("table.json"), &document).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &document).unwrap();
    std::fs::write(www.join("table.json.gz"), gz.finish().unwrap()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut nginx = nginx_start(dir, port);
    let nginx_url = format!("http://127.0.0.1:{port}/v1/routing-table");
    let started = Instant::now();
    // The ETag of the representation wrk gets (nginx tags its .gz file apart).
    let nginx_etag = loop {
        let answered = api
            .http
            .get(&nginx_url)
            .header("accept-encoding", "gzip")
            .send()
            .await;
        if let Ok(response) = answered
            && response.status().is_success()
        {
            assert_eq!(response.headers()["content-encoding"], "gzip");
            break response.headers()["etag"].to_str().unwrap().to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nginx did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let bulkhead_url = format!("{}/v1/routing-table", api.base);
    let auth = format!("Bearer {TOKEN}");
    let gzip = ("Accept-Encoding", "gzip");
    // Both answer gzip, and 304 to their own ETag, before anything is timed.
    for (url, tag) in [(&bulkhead_url, &etag), (&nginx_url, &nginx_etag)] {
        let zipped = api
            .http
            .get(url)
            .bearer_auth(TOKEN)
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(zipped.headers()["content-encoding"], "gzip", "{url}");
        let cached = api
            .http
            .get(url)
            .bearer_auth(TOKEN)
            .header("accept-encoding", "gzip")
            .header("if-none-match", tag.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(cached.status(), 304, "{url}");
    }
    // Warm-up, not recorded.
    wrk(&bulkhead_url, &[("Authorization", &auth), gzip]);
    let full_bulkhead = wrk(&bulkhead_url, &[("Authorization", &auth), gzip]);
    let full_nginx = wrk(&nginx_url, &[("Authorization", &auth), gzip]);
    let cached_bulkhead = wrk(
        &bulkhead_url,
        &[("Authorization", &auth), gzip, ("If-None-Match", &etag)],
    );
    let cached_nginx = wrk(
        &nginx_url,
        &[
            ("Authorization", &auth),
            gzip,
            ("If-None-Match", &nginx_etag),
        ],
    );
    // SIGQUIT: the master stops its workers (SIGKILL would leave them running).
    let _ = Command::new("kill")
        .args(["-QUIT", &nginx.id().to_string()])
        .status();
    let _ = nginx.wait();
    println!(
        "| request (10,000 routes, wrk -t2 -c64, {WRK_SECS} s) | Bulkhead req/s | nginx req/s | ratio |"
    );
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| full snapshot (gzip) | {full_bulkhead:.0} | {full_nginx:.0} | {:.2} |",
        full_bulkhead / full_nginx
    );
    println!(
        "| If-None-Match → 304 | {cached_bulkhead:.0} | {cached_nginx:.0} | {:.2} |",
        cached_bulkhead / cached_nginx
    );
}

async fn propagation(api: &Api, app: &bulkhead::app::App) {
    let revision = app.routing.current().unwrap().revision;
    let (arrivals, watchers) = common::watchers_open(&api.base, revision, WATCHERS).await;
    let http = common::http();
    let instance = instance::Entity::find()
        .filter(instance::Column::State.eq("running"))
        .one(&app.db)
        .await
        .unwrap()
        .unwrap();
    let mut samples = Vec::new();
    let mut announced = Vec::new();
    let mut written = Vec::new();
    for round in 0..ROUNDS {
        for (health, measured) in [
            (InstanceHealth::Unhealthy, false),
            (InstanceHealth::Healthy, true),
        ] {
            let before = app.routing.current().unwrap().revision;
            let started = Instant::now();
            app.instance_health_flips(&[(instance.clone(), health, 1)])
                .await
                .unwrap();
            if measured {
                written.push(started.elapsed());
            }
            // The revision that carries the change.
            let target = loop {
                let current = app.routing.current().unwrap();
                if current.revision > before {
                    if measured {
                        announced.push(started.elapsed());
                    }
                    break current.revision;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "round {round}: no revision"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            for arrived in &arrivals {
                let at = loop {
                    let seen = arrived
                        .lock()
                        .unwrap()
                        .iter()
                        .find(|(revision, _)| *revision >= target)
                        .map(|(_, at)| *at);
                    if let Some(at) = seen {
                        break at;
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(20),
                        "round {round}: a watcher never got revision {target}"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                if measured {
                    samples.push(at.duration_since(started));
                }
            }
        }
    }
    for watcher in watchers {
        watcher.abort();
    }
    let metrics = http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "bulkhead_routing_publish_seconds",
        "bulkhead_routing_sign_seconds",
    ] {
        let value = |suffix: &str| {
            metrics
                .lines()
                .find(|line| line.starts_with(&format!("{name}_{suffix} ")))
                .and_then(|line| line.split(' ').nth(1)?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        println!(
            "{name}: mean {:.1} ms over {}",
            1000.0 * value("sum") / value("count").max(1.0),
            value("count")
        );
    }
    println!(
        "instance healthy written: p50 {:?}, max {:?}; → revision announced (published and committed), {ROUNDS} rounds: p50 {:?}, max {:?}",
        percentile(written.clone(), 50.0),
        percentile(written, 100.0),
        percentile(announced.clone(), 50.0),
        percentile(announced, 100.0)
    );
    println!(
        "propagation to {WATCHERS} watchers (instance healthy → change event received), {ROUNDS} rounds, {} samples: p50 {:?}, p99 {:?}, max {:?}",
        samples.len(),
        percentile(samples.clone(), 50.0),
        percentile(samples.clone(), 99.0),
        percentile(samples, 100.0)
    );
}
