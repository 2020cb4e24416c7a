//! Provider benchmarks on the local platform (`bulkhead::dev`), against the running server:
//!
//! 1. The overhead of provisioning through the API and the sandboxed `gcp` plugin, against
//!    the same HTTP calls made natively to the simulator: with a token exchange per provision
//!    (sign the assertion, exchange it, insert the instance, read it back — what the plugin did
//!    before contract 0.3.0's cache), and with a token kept between provisions (insert, read
//!    back — what the plugin does with the cache).
//! 2. The time from a provider fault (the GCP account suspended in the simulator) to its
//!    breaker opening, with calls flowing (one every 20 ms) and with only the periodic probes
//!    (every 10 s, the default).
//!
//! Run: `cargo bench -p bulkhead-api --bench providers` (release). Prints medians and ratios.
//! `-- provision` runs the first only.

use std::time::{Duration, Instant};

mod common;

use bulkhead::dev::{DevPlatform, GCP_ZONE};
use bulkhead_simulators::faults::FaultState;
use common::{TOKEN, insert_and_get, median, provision_raw, token_exchange};
use serde_json::{Value, json};

const ROUNDS: usize = 60;

async fn provision_api(http: &reqwest::Client, base: &str, key: &str) {
    let made = http
        .post(format!("{base}/v1/providers/gcp/instances"))
        .bearer_auth(TOKEN)
        .json(&json!({ "instance_key": key, "region": GCP_ZONE, "artifact": "shop/web:1", "port": 8080 }))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201, "{}", made.text().await.unwrap());
}

async fn state(http: &reqwest::Client, base: &str, provider: &str) -> String {
    let view: Value = http
        .get(format!("{base}/v1/providers/{provider}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    view["state"].as_str().unwrap().to_owned()
}

async fn suspend(http: &reqwest::Client, platform: &DevPlatform, suspended: bool) {
    http.put(format!("{}/_sim/faults", platform.gcp.url()))
        .json(&FaultState {
            suspended,
            ..Default::default()
        })
        .send()
        .await
        .unwrap();
}

/// Suspends the GCP account and waits until the provider is unavailable (with calls every
/// 20 ms when `calls`), then recovers it; returns the time to open.
async fn fault_to_open(
    http: &reqwest::Client,
    base: &str,
    platform: &DevPlatform,
    calls: bool,
) -> Duration {
    suspend(http, platform, true).await;
    let started = Instant::now();
    let mut round = 0;
    while state(http, base, "gcp").await != "unavailable" {
        if calls {
            round += 1;
            let _ = http
                .get(format!("{base}/v1/providers/gcp/instances/probe-{round}"))
                .bearer_auth(TOKEN)
                .send()
                .await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let opened = started.elapsed();
    suspend(http, platform, false).await;
    while state(http, base, "gcp").await != "healthy" {
        let _ = http
            .post(format!("{base}/v1/providers/gcp/probe"))
            .bearer_auth(TOKEN)
            .send()
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    opened
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let (platform, server) = common::platform_and_server(dir.path(), |_| {}).await;
    let base = format!("http://{}", server.addr);
    let http = common::http();

    // Warm up every path (connections, compiled code, the breaker closed, the plugin's cache).
    let bearer = token_exchange(&http, &platform).await;
    for round in 0..10 {
        provision_raw(&http, &platform, &format!("warm-raw-{round}")).await;
        insert_and_get(&http, &platform, &bearer, &format!("warm-cached-{round}")).await;
        provision_api(&http, &base, &format!("warm-api-{round}")).await;
    }
    let (mut raw, mut cached, mut api, mut read) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // The API's own cost, no plugin: an authenticated read of the provider.
        let started = Instant::now();
        state(&http, &base, "gcp").await;
        read.push(started.elapsed());
        let started = Instant::now();
        provision_raw(&http, &platform, &format!("raw-{round}")).await;
        raw.push(started.elapsed());
        let started = Instant::now();
        insert_and_get(&http, &platform, &bearer, &format!("cached-{round}")).await;
        cached.push(started.elapsed());
        let started = Instant::now();
        provision_api(&http, &base, &format!("api-{round}")).await;
        api.push(started.elapsed());
    }
    let (raw, cached, api, read) = (median(raw), median(cached), median(api), median(read));
    println!(
        "gcp provision, median of {ROUNDS}: native with a token exchange {raw:?}; native with a kept token {cached:?}; through the API and the plugin {api:?}; ratios {:.2} and {:.2}; an authenticated API read of the provider (no plugin) {read:?}",
        api.as_secs_f64() / raw.as_secs_f64(),
        api.as_secs_f64() / cached.as_secs_f64(),
    );
    if std::env::args().any(|arg| arg == "provision") {
        server.shutdown().await.unwrap();
        platform.shutdown().await;
        return;
    }

    let mut with_calls = Vec::new();
    for _ in 0..5 {
        with_calls.push(fault_to_open(&http, &base, &platform, true).await);
    }
    println!(
        "fault to breaker open with calls flowing (5 runs): median {:?}, all {with_calls:?}",
        median(with_calls.clone())
    );
    let mut probes_only = Vec::new();
    for _ in 0..3 {
        probes_only.push(fault_to_open(&http, &base, &platform, false).await);
    }
    println!(
        "fault to breaker open with probes only, every 10 s (3 runs): median {:?}, all {probes_only:?}",
        median(probes_only.clone())
    );

    server.shutdown().await.unwrap();
    platform.shutdown().await;
}
