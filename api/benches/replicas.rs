//! Replicas on one PostgreSQL database, in this process (release build), with the local
//! platform's simulated clouds:
//!
//! 1. **Cross-replica event latency.** Deployments are made through replica A (which leads the
//!    deploy work, so their events are written there) and each deployment's event stream is
//!    read on A (the baseline: woken in-process) and on B (woken by the change feed). An
//!    event's latency is its arrival on the stream minus its `created_at` (one clock: one
//!    process). At 1 and at 10 deployments in flight at once.
//! 2. **API write throughput.** Clients create projects (`POST /v1/projects`, one transaction
//!    with its audit event each) for 10 s, all through one replica, then spread round-robin
//!    over three; at 16 and at 64 clients.
//!
//! Needs PostgreSQL: `BULKHEAD_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres`.
//! Run: `cargo bench -p bulkhead-api --bench replicas`.

mod common;

use std::time::{Duration, Instant};

use bulkhead::dev::DevPlatform;
use bulkhead::server::RunningServer;
use chrono::{DateTime, Utc};
use common::{Api, median, percentile};
use futures::StreamExt;
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};

const SECRET_KEY: &str = "cmVwbGljYXMtc2hhcmUtb25lLXNlY3JldC1rZXktLS0=";
/// Deployments measured per size (each has about ten events).
const DEPLOYMENTS: usize = 40;
const WRITE_FOR: Duration = Duration::from_secs(10);

async fn database_create(admin_url: &str) -> String {
    let name = format!("bulkhead_bench_replicas_{}", uuid::Uuid::new_v4().simple());
    let admin = Database::connect(admin_url).await.unwrap();
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    admin.close().await.unwrap();
    let mut url = reqwest::Url::parse(admin_url).unwrap();
    url.set_path(&name);
    url.to_string()
}

async fn replica_start(dir: &std::path::Path, platform: &DevPlatform, url: &str) -> RunningServer {
    let url = url.to_owned();
    common::server_start(dir, platform, move |settings| {
        settings.database_url = url;
        settings.secret_key = Some(SECRET_KEY.to_owned().into());
    })
    .await
}

fn api(server: &RunningServer) -> Api {
    Api {
        http: common::http(),
        base: format!("http://{}", server.addr),
    }
}

/// Reads `id`'s event stream on `api` until it ends: each event's latency.
async fn stream_latencies(api: &Api, service: &str, id: &str) -> Vec<Duration> {
    let mut response = api
        .http
        .get(format!("{}{service}/deployments/{id}/events", api.base))
        .bearer_auth(common::TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut latencies = Vec::new();
    let mut buffer = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        let arrived = Utc::now();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let Some(data) = frame.lines().find_map(|line| line.strip_prefix("data:")) else {
                continue;
            };
            let event: Value = serde_json::from_str(data.trim()).unwrap();
            if let Some(created) = event["created_at"].as_str() {
                let created: DateTime<Utc> = created.parse().unwrap();
                latencies.push((arrived - created).to_std().unwrap_or_default());
            }
        }
    }
    latencies
}

async fn event_latency(platform: &DevPlatform, dir: &std::path::Path, admin_url: &str) {
    let url = database_create(admin_url).await;
    let a = replica_start(dir, platform, &url).await;
    let b = replica_start(dir, platform, &url).await;
    let (on_a, on_b) = (api(&a), api(&b));
    let (project, environment) = on_a.project().await;
    println!(
        "| deployments at once | stream on A (writer): p50 | p99 | stream on B: p50 | p99 | B p50 / A p50 | events |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for at_once in [1usize, 10] {
        let mut services = Vec::new();
        for n in 0..at_once {
            services.push(
                on_a.service(
                    &project,
                    &environment,
                    json!({
                        "name": format!("web-{at_once}-{n}"), "port": 8080,
                        "source": { "type": "artifact", "image": "shop/web:1" },
                        "placement": { "providers": [{ "name": "gcp" }] },
                        "health_check": { "interval_ms": 100, "timeout_ms": 500 },
                    }),
                )
                .await,
            );
        }
        let (mut writer, mut other) = (Vec::new(), Vec::new());
        for _ in 0..DEPLOYMENTS.div_ceil(at_once) {
            let rounds = futures::stream::iter(&services)
                .map(|service| {
                    let (on_a, on_b) = (&on_a, &on_b);
                    async move {
                        let id = on_a.deploy(service).await;
                        tokio::join!(
                            stream_latencies(on_a, service, &id),
                            stream_latencies(on_b, service, &id)
                        )
                    }
                })
                .buffer_unordered(at_once)
                .collect::<Vec<_>>()
                .await;
            for (a_lat, b_lat) in rounds {
                writer.extend(a_lat);
                other.extend(b_lat);
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (a50, a99) = (median(writer.clone()), percentile(writer.clone(), 99.0));
        let (b50, b99) = (median(other.clone()), percentile(other.clone(), 99.0));
        println!(
            "| {at_once} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} | {} |",
            ms(a50),
            ms(a99),
            ms(b50),
            ms(b99),
            ms(b50) / ms(a50).max(0.001),
            other.len()
        );
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Projects created per second by `clients` through `replicas` (round-robin).
async fn write_rate(replicas: &[Api], clients: usize) -> f64 {
    let deadline = Instant::now() + WRITE_FOR;
    let started = Instant::now();
    let made: usize = futures::stream::iter(0..clients)
        .map(|client| {
            let api = &replicas[client % replicas.len()];
            async move {
                let mut made = 0;
                while Instant::now() < deadline {
                    let response = api
                        .http
                        .post(format!("{}/v1/projects", api.base))
                        .bearer_auth(common::TOKEN)
                        .json(&json!({ "name": format!("load-{client}-{made}") }))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
                    made += 1;
                }
                made
            }
        })
        .buffer_unordered(clients)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .sum();
    made as f64 / started.elapsed().as_secs_f64()
}

async fn write_throughput(platform: &DevPlatform, dir: &std::path::Path, admin_url: &str) {
    let url = database_create(admin_url).await;
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(replica_start(dir, platform, &url).await);
    }
    let apis: Vec<Api> = servers.iter().map(api).collect();
    println!("| clients | 1 replica | 3 replicas | 3 / 1 |");
    println!("| ---: | ---: | ---: | ---: |");
    for clients in [16, 64] {
        let one = write_rate(&apis[..1], clients).await;
        let three = write_rate(&apis, clients).await;
        println!(
            "| {clients} | {one:.0}/s | {three:.0}/s | {:.2} |",
            three / one
        );
    }
    for server in servers {
        server.shutdown().await.unwrap();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(admin_url) = std::env::var("BULKHEAD_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        eprintln!("set BULKHEAD_TEST_POSTGRES_URL (replicas share a PostgreSQL database)");
        std::process::exit(2);
    };
    let only = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    let dir = tempfile::tempdir().unwrap();
    let platform = DevPlatform::start(dir.path()).await.unwrap();
    if only.as_deref().is_none_or(|only| only == "events") {
        println!("cross-replica deployment event latency ({DEPLOYMENTS} deployments a size)");
        event_latency(&platform, dir.path(), &admin_url).await;
    }
    if only.as_deref().is_none_or(|only| only == "writes") {
        println!("API write throughput, {WRITE_FOR:?} a run (POST /v1/projects)");
        write_throughput(&platform, dir.path(), &admin_url).await;
    }
    platform.shutdown().await;
}
