//! Service logs on the local platform (`bulkhead::dev`), release build: how long a line a
//! workload prints takes to reach a follower of its service's logs.
//!
//! A service of 10, then 100 instances on gcp (simulated instances, which print at once), and
//! one of 10 instances of `bulkhead hello` on metal (real processes on the host agent, which
//! reads their output every 100 ms). For each, 50 lines are printed one after the other, each
//! by another instance and after a pause of 0 to 1 s (so that prints fall at every point of
//! the follower's cycle, not just after its last read), and timed until they arrive:
//!
//! - through a follower of the service's logs (Server-Sent Events: the server asks every
//!   instance's provider every 500 ms, merging their pages);
//! - the baseline, in the same run: a client that asks for the next page itself every 50 ms
//!   (the same reads, ten times as often).
//!
//! Run: `cargo bench -p bulkhead-api --bench logs`.

mod common;

use std::time::{Duration, Instant};

use bulkhead::dev::DevPlatform;
use bulkhead_simulators::instances::OutputStream;
use common::{Api, TOKEN, median, percentile};
use serde_json::{Value, json};

const LINES: usize = 50;

/// Where the instances run and how one is made to print.
#[derive(Clone, Copy)]
enum Cloud {
    Gcp,
    Metal,
}

async fn service_of(api: &Api, cloud: Cloud, replicas: u32) -> (String, Vec<(String, String)>) {
    let (project, environment) = api.project().await;
    let provider = match cloud {
        Cloud::Gcp => "gcp",
        Cloud::Metal => "metal",
    };
    let hello =
        std::env::var("BULKHEAD_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_bulkhead").to_owned());
    let service = api
        .service(
            &project,
            &environment,
            json!({
                "name": "web", "port": 8080, "replicas": replicas,
                "source": { "type": "command", "command": [hello, "hello"] },
                "placement": { "providers": [{ "name": provider }] },
                "health_check": { "interval_ms": 5000, "timeout_ms": 1000 },
            }),
        )
        .await;
    let id = api.deploy(&service).await;
    api.healthy_wait(&service, &id).await;
    let instances = api
        .call(
            reqwest::Method::GET,
            &format!("{service}/instances?limit=200"),
            None,
        )
        .await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|instance| {
            (
                instance["instance_key"].as_str().unwrap().to_owned(),
                instance["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (service, instances)
}

/// Makes instance `(key, address)` print `text`; returns when it has.
async fn print(
    platform: &DevPlatform,
    http: &reqwest::Client,
    cloud: Cloud,
    (key, address): &(String, String),
    text: &str,
) -> String {
    match cloud {
        Cloud::Gcp => {
            assert!(platform.gcp.instance_print(key, OutputStream::Stdout, text));
            text.to_owned()
        }
        Cloud::Metal => {
            http.get(format!("http://{address}/{text}"))
                .send()
                .await
                .unwrap();
            format!("GET /{text} 200")
        }
    }
}

/// The pause before the `n`th print: spread over 0 to 1 s, the same in every run.
fn pause(n: usize) -> Duration {
    Duration::from_millis((n as u64 * 379) % 1000)
}

/// Reads `stream` until a `logs` event holds `text`.
async fn event_with(stream: &mut reqwest::Response, buffer: &mut String, text: &str) {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let Some(data) = frame.lines().find_map(|line| line.strip_prefix("data:")) else {
                continue;
            };
            let page: Value = serde_json::from_str(data.trim()).unwrap();
            if std::env::var_os("BENCH_VERBOSE").is_some() {
                eprintln!(
                    "event: {} lines, missing {}",
                    page["lines"].as_array().map_or(0, Vec::len),
                    page["missing"]
                );
            }
            if page["lines"]
                .as_array()
                .unwrap()
                .iter()
                .any(|line| line["text"] == text)
            {
                return;
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(30), stream.chunk())
            .await
            .expect("a line within 30 s")
            .unwrap()
            .expect("the stream goes on");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

async fn measure(platform: &DevPlatform, api: &Api, cloud: Cloud, replicas: u32, label: &str) {
    let (service, instances) = service_of(api, cloud, replicas).await;
    assert_eq!(instances.len(), replicas as usize);
    let logs = format!("{}{service}/logs", api.base);

    // Followed.
    let mut stream = api
        .http
        .get(&logs)
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut buffer = String::new();
    let mut followed = Vec::with_capacity(LINES);
    for n in 0..LINES {
        let instance = &instances[n % instances.len()];
        let started = Instant::now();
        let text = print(
            platform,
            &api.http,
            cloud,
            instance,
            &format!("followed-{n}"),
        )
        .await;
        event_with(&mut stream, &mut buffer, &text).await;
        followed.push(started.elapsed());
        if std::env::var_os("BENCH_VERBOSE").is_some() {
            eprintln!(
                "{label} followed {n}: pause {:?}, {:?}",
                pause(n),
                started.elapsed()
            );
        }
    }
    drop(stream);

    // Polled every 50 ms.
    let mut cursor = api
        .call(reqwest::Method::GET, &format!("{service}/logs"), None)
        .await["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut polled = Vec::with_capacity(LINES);
    for n in 0..LINES {
        let instance = &instances[n % instances.len()];
        tokio::time::sleep(pause(n)).await;
        let started = Instant::now();
        let text = print(platform, &api.http, cloud, instance, &format!("polled-{n}")).await;
        'found: loop {
            let page = api
                .call(
                    reqwest::Method::GET,
                    &format!("{service}/logs?cursor={cursor}&limit=1000"),
                    None,
                )
                .await;
            cursor = page["next_cursor"].as_str().unwrap().to_owned();
            if page["lines"]
                .as_array()
                .unwrap()
                .iter()
                .any(|line| line["text"] == text)
            {
                break 'found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        polled.push(started.elapsed());
    }
    let (followed_p50, followed_p99) = (median(followed.clone()), percentile(followed, 99.0));
    let (polled_p50, polled_p99) = (median(polled.clone()), percentile(polled, 99.0));
    println!(
        "{label}: printed → follower p50 {followed_p50:?} p99 {followed_p99:?}; \
         polled every 50 ms p50 {polled_p50:?} p99 {polled_p99:?}; \
         ratio p99 {:.2}",
        followed_p99.as_secs_f64() / polled_p99.as_secs_f64()
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        bulkhead_common::tls::crypto_provider_install();
        let dir = tempfile::tempdir().unwrap();
        let (platform, server) = common::platform_and_server(dir.path(), |_| {}).await;
        let api = Api {
            http: common::http(),
            base: format!("http://{}", server.addr),
        };
        measure(&platform, &api, Cloud::Gcp, 10, "gcp, 10 instances").await;
        measure(&platform, &api, Cloud::Gcp, 100, "gcp, 100 instances").await;
        measure(&platform, &api, Cloud::Metal, 10, "metal, 10 instances").await;
        server.shutdown().await.unwrap();
        platform.shutdown().await;
    });
}
