//! Deploy pipeline benchmarks on the local platform (`bulkhead::dev`), release build:
//!
//! 1. **Deployment latency**: from `POST …/deployments` to the deployment's `deployment.healthy`
//!    event (read from its event stream), for one service of 3 replicas over gcp, aws and metal
//!    (a real process on the host agent) with a 100 ms health check; median and p99 over 50
//!    deployments, on SQLite and, in the same run, on PostgreSQL (`BULKHEAD_TEST_POSTGRES_URL`).
//! 2. **Drain throughput**: a backlog of 1,000, then 10,000 deployments (services of one
//!    replica on gcp) queued while the pipeline is paused, then resumed with the default
//!    concurrency limit of 8 (and the per-provider rate lifted, so that the concurrency limit
//!    is what is measured): provisions per second until the simulator holds them all; against
//!    the same provider calls made directly, 8 at a time, in the same run: through the plugin
//!    host (the sandboxed `gcp` plugin's `provision`, what the pipeline calls, without the
//!    pipeline), and natively to the simulator (insert and read back, with a kept token, as
//!    the plugin does with its cache).
//! 3. **Fairness**: one project's single deployment, from its creation to its instance
//!    `starting`, alone, and queued behind another project's backlog of 1,000 (one operation
//!    at a time, each 20 ms at the simulator), with the time of a reconciler pass.
//!
//! Run: `cargo bench -p bulkhead-api --bench deploys` (`-- latency`, `-- drain` or
//! `-- fairness` for one).

mod common;

use std::time::{Duration, Instant};

use bulkhead::dev::{DevPlatform, GCP_ZONE};
use bulkhead::plugins::InstanceSpec;
use common::{Api, insert_and_get, median, percentile, postgres_database, token_exchange};
use futures::StreamExt;
use serde_json::json;

const RUNS: usize = 50;
/// The backlogs drained, smallest first: a cost that grows with the backlog shows as a rate
/// that falls.
const BACKLOGS: [usize; 2] = [1000, 10_000];
/// The other project's backlog in the fairness run.
const FAIRNESS_BACKLOG: usize = 1000;

async fn latency(
    label: &str,
    platform: &DevPlatform,
    dir: &std::path::Path,
    database_url: Option<String>,
) {
    let server = common::server_start(dir, platform, |settings| {
        if let Some(url) = database_url {
            settings.database_url = url;
        }
    })
    .await;
    let api = Api {
        http: common::http(),
        base: format!("http://{}", server.addr),
    };
    let (project, environment) = api.project().await;
    let service = api
        .service(
            &project,
            &environment,
            json!({
                "name": "web", "port": 8080, "replicas": 3,
                "source": { "type": "command", "command": ["python3", "-m", "http.server", "$PORT"] },
                "placement": { "providers": [{ "name": "gcp" }, { "name": "aws" }, { "name": "metal" }] },
                "health_check": { "interval_ms": 100, "timeout_ms": 500 },
            }),
        )
        .await;
    for _ in 0..3 {
        let id = api.deploy(&service).await;
        api.healthy_wait(&service, &id).await;
    }
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        let id = api.deploy(&service).await;
        api.healthy_wait(&service, &id).await;
        samples.push(started.elapsed());
    }
    println!(
        "{label}: deployment of 3 replicas (gcp, aws, metal) to healthy, {RUNS} runs: median {:?}, p99 {:?}",
        median(samples.clone()),
        percentile(samples, 99.0)
    );
    server.shutdown().await.unwrap();
}

async fn drain(platform: &DevPlatform, dir: &std::path::Path, backlog: usize) {
    // The concurrency limit (8) is what is measured, not the per-provider rate (20 a second
    // by default), which would cap this at 20 provisions a second on its own.
    let server = common::server_start(dir, platform, |settings| {
        settings.deploy.provider_rate = 100_000;
    })
    .await;
    let api = Api {
        http: common::http(),
        base: format!("http://{}", server.addr),
    };
    let (project, environment) = api.project().await;
    api.call(
        reqwest::Method::POST,
        "/v1/deploy-pipeline/pause",
        Some(json!({ "reason": "benchmark" })),
    )
    .await;
    let mut services = Vec::with_capacity(backlog);
    for n in 0..backlog {
        services.push(
            api.service(
                &project,
                &environment,
                json!({
                    "name": format!("svc-{backlog}-{n}"), "port": 8080,
                    "source": { "type": "artifact", "image": "shop/web:1" },
                    "placement": { "providers": [{ "name": "gcp" }] },
                    "health_check": { "interval_ms": 5000, "start_timeout_secs": 3600 },
                }),
            )
            .await,
        );
    }
    for service in &services {
        api.deploy(service).await;
    }
    let before = platform.gcp.instance_count();
    let started = Instant::now();
    api.call(reqwest::Method::POST, "/v1/deploy-pipeline/resume", None)
        .await;
    while platform.gcp.instance_count() < before + backlog {
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "the backlog did not drain"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pipeline = started.elapsed();
    let max_in_flight = platform.gcp.faults.calls().max_in_flight;
    println!(
        "drain of {backlog}: the pipeline took {pipeline:?} ({:.0} provisions/s)",
        backlog as f64 / pipeline.as_secs_f64()
    );
    // Each simulated instance listens on a socket of its own: the baselines' instances would
    // not fit beside the pipeline's under a 20,000 open-file limit.
    platform.gcp.terminate_all();

    // The same provisions through the plugin host, 8 at a time: the pipeline's calls without
    // the pipeline.
    let active = server.app.providers.active("gcp").unwrap();
    let host = &server.app.providers.host;
    let started = Instant::now();
    futures::stream::iter(0..backlog)
        .map(|n| {
            let spec = InstanceSpec {
                instance_key: format!("host-drain-{backlog}-{n}"),
                region: GCP_ZONE.into(),
                artifact: "shop/web:1".into(),
                port: 8080,
                env: Vec::new(),
                labels: Vec::new(),
                // What the pipeline passes (the service's check; gcp ignores it).
                health_check: Some(
                    bulkhead::app::projects::services::spec::HealthCheckSpec::default()
                        .to_contract(),
                ),
                source: None,
                size: bulkhead::app::shared::sizes::ServiceSizes::default()
                    .default
                    .to_contract(),
            };
            let active = active.clone();
            async move {
                host.plugin_provision(&active.plugin, &active.env, spec)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
    let sandboxed = started.elapsed();
    platform.gcp.terminate_all();
    server.shutdown().await.unwrap();

    let http = common::http();
    let bearer = token_exchange(&http, platform).await;
    let started = Instant::now();
    futures::stream::iter(0..backlog)
        .map(|n| {
            let (http, bearer) = (&http, &bearer);
            async move {
                insert_and_get(http, platform, bearer, &format!("raw-drain-{backlog}-{n}")).await
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
    let raw = started.elapsed();
    let per_second = |took: Duration| backlog as f64 / took.as_secs_f64();
    println!(
        "drain of {backlog} queued deployments at concurrency 8: {:.0} provisions/s ({pipeline:?}); the same calls made directly, 8 at a time, through the plugin host: {:.0}/s ({sandboxed:?}), ratio {:.2}; natively: {:.0}/s ({raw:?}), ratio {:.3}; most simulator calls in flight at once: {max_in_flight}",
        per_second(pipeline),
        per_second(sandboxed),
        sandboxed.as_secs_f64() / pipeline.as_secs_f64(),
        per_second(raw),
        raw.as_secs_f64() / pipeline.as_secs_f64(),
    );
}

/// From the creation of one project's deployment to its instance `starting`, alone and behind
/// another project's backlog of [`FAIRNESS_BACKLOG`], one operation at a time.
async fn fairness(platform: &DevPlatform, dir: &std::path::Path) {
    let server = common::server_start(dir, platform, |settings| {
        settings.deploy.provider_rate = 100_000;
        settings.deploy.concurrency = 1;
    })
    .await;
    let api = Api {
        http: common::http(),
        base: format!("http://{}", server.addr),
    };
    let spec = |name: String| {
        json!({
            "name": name, "port": 8080,
            "source": { "type": "artifact", "image": "shop/web:1" },
            "placement": { "providers": [{ "name": "gcp" }] },
            "health_check": { "interval_ms": 5000, "start_timeout_secs": 3600 },
        })
    };
    let (quiet_project, quiet_environment) = api.project().await;
    let (busy_project, busy_environment) = api.project().await;
    let mut quiet = Vec::new();
    for n in 0..6 {
        quiet.push(
            api.service(
                &quiet_project,
                &quiet_environment,
                spec(format!("quiet-{n}")),
            )
            .await,
        );
    }
    let mut busy = Vec::with_capacity(FAIRNESS_BACKLOG);
    for n in 0..FAIRNESS_BACKLOG {
        busy.push(
            api.service(&busy_project, &busy_environment, spec(format!("busy-{n}")))
                .await,
        );
    }
    platform
        .gcp
        .faults
        .set(bulkhead_simulators::faults::FaultState {
            latency_ms: 10,
            ..Default::default()
        });
    let starting = async |service: &str| {
        let started = Instant::now();
        api.deploy(service).await;
        loop {
            let instances = api
                .call(reqwest::Method::GET, &format!("{service}/instances"), None)
                .await;
            let state = instances["items"][0]["state"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !["", "pending", "provisioning"].contains(&state.as_str()) {
                return started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let mut alone = Vec::new();
    for service in &quiet[..3] {
        alone.push(starting(service).await);
    }
    for service in &busy {
        api.deploy(service).await;
    }
    let mut behind = Vec::new();
    for service in &quiet[3..] {
        behind.push(starting(service).await);
    }
    let status = api
        .call(reqwest::Method::GET, "/v1/deploy-pipeline", None)
        .await;
    println!(
        "fairness, one operation at a time (20 ms each at the simulator): a project's deployment to `starting` alone {alone:?}, behind another project's {FAIRNESS_BACKLOG} queued {behind:?}; the backlog still queued after: {}",
        status["reconciler"]["queue_depth"]
    );
    platform.gcp.faults.set(Default::default());
    server.shutdown().await.unwrap();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let only = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    let dir = tempfile::tempdir().unwrap();
    let platform = DevPlatform::start(dir.path()).await.unwrap();
    if only.as_deref().is_none_or(|only| only == "latency") {
        latency("SQLite", &platform, dir.path(), None).await;
        match postgres_database().await {
            Some(url) => latency("PostgreSQL", &platform, dir.path(), Some(url)).await,
            None => println!("PostgreSQL: skipped (set BULKHEAD_TEST_POSTGRES_URL)"),
        }
    }
    if only.as_deref().is_none_or(|only| only == "drain") {
        for backlog in BACKLOGS {
            drain(&platform, dir.path(), backlog).await;
        }
    }
    if only.as_deref().is_none_or(|only| only == "fairness") {
        fairness(&platform, dir.path()).await;
    }
    platform.shutdown().await;
}
