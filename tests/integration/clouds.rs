//! The bundled cloud plugins end to end: the real server, each plugin (Wasm, sandboxed)
//! against its simulator, through the instances API. Provision, describe, list, deprovision,
//! idempotent re-provisioning, each fault mapped to the right answer, and the provider's
//! breaker following the simulated cloud's health.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use bulkhead::dev::{AWS_REGION, GCP_ZONE};
use bulkhead_agent::Isolation;
use bulkhead_simulators::aws::{AwsCredentials, AwsSimulator};
use bulkhead_simulators::faults::FaultState;

use crate::db_tests;
use crate::support::{
    ADMIN_TOKEN, Reply, TestServer, healthy_probe, platform, provider_probe, provider_state,
    state_wait,
};

db_tests!(
    aws_instances_against_the_simulator,
    gcp_instances_against_the_simulator,
    metal_instances_run_as_processes_on_the_agent,
    suspending_one_cloud_leaves_the_others_alone,
);

/// Provision (twice: no duplicate), answer over HTTP, describe, list, deprovision (twice).
async fn lifecycle_check(s: &TestServer, provider: &str, region: &str, artifact: &str) -> Value {
    let create =
        json!({ "instance_key": "web-1", "region": region, "artifact": artifact, "port": 8080 });
    let path = format!("/v1/providers/{provider}/instances");
    let made = s.post(&path, ADMIN_TOKEN, create.clone()).await;
    let made = made.assert_status(201).clone();
    let again = s.post(&path, ADMIN_TOKEN, create).await;
    assert_eq!(again.assert_status(201)["provider_id"], made["provider_id"]);
    let address = made["address"].as_str().expect("an address").to_owned();
    let started = Instant::now();
    while crate::support::get(format!("http://{address}/"))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{address} never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let view = s.get(&format!("{path}/web-1"), ADMIN_TOKEN).await;
    assert_eq!(view.assert_status(200)["provider_id"], made["provider_id"]);
    let list = s.get(&path, ADMIN_TOKEN).await;
    let listed = list.assert_status(200)["items"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    s.delete(&format!("{path}/web-1"), ADMIN_TOKEN)
        .await
        .assert_status(204);
    s.delete(&format!("{path}/web-1"), ADMIN_TOKEN)
        .await
        .assert_status(204);
    s.get(&format!("{path}/web-1"), ADMIN_TOKEN)
        .await
        .assert_problem(404, "instance_not_found");
    made
}

const LOOPBACK: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Points provider `name` at a simulator: configuration, secrets and an allowlist of just it.
async fn provider_point(
    s: &TestServer,
    name: &str,
    sim_addr: SocketAddr,
    config: Value,
    secrets: Value,
) {
    s.patch(
        &format!("/v1/providers/{name}"),
        ADMIN_TOKEN,
        json!({ "config": config, "secrets": secrets, "allowlist": [sim_addr.to_string()] }),
    )
    .await
    .assert_status(200);
}

pub async fn fault_set(sim_url: &str, faults: FaultState) {
    let status = crate::support::http()
        .put(format!("{sim_url}/_sim/faults"))
        .json(&faults)
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success());
}

async fn instance_create(s: &TestServer, provider: &str, key: &str, region: &str) -> Reply {
    s.post(
        &format!("/v1/providers/{provider}/instances"),
        ADMIN_TOKEN,
        json!({ "instance_key": key, "region": region, "artifact": "shop/web:1", "port": 8080 }),
    )
    .await
}

/// Probes provider `name` now (after the probe a settings change started, if any) and checks
/// that the probe met the fault `signal` (as the breaker words it, e.g. `unauthorized`) with
/// `evidence` from the cloud's own answer; that the breaker is then open, so that a call is
/// refused without reaching the cloud and says why; and that `secret` shows nowhere.
///
/// The probe, not a call, is what meets the fault here: a background probe may meet it
/// first as well, and either way the answers below are the same. (Which answer a call that
/// meets such a fault itself gets is a unit test of `provider_instances`.)
async fn breaker_opened_by(s: &TestServer, name: &str, signal: &str, evidence: &str, secret: &str) {
    let probe = provider_probe(s, name).await;
    assert_eq!(
        probe.assert_status(200)["status"],
        "unavailable",
        "{}",
        probe.text
    );
    assert!(probe.text.contains(evidence), "{}", probe.text);
    assert_eq!(provider_state(s, name).await, "unavailable");
    let refused = instance_create(s, name, "web-refused", "anywhere").await;
    refused.assert_problem(503, "provider_unavailable");
    assert!(refused.header("retry-after").is_some(), "{}", refused.text);
    assert!(refused.text.contains(signal), "{}", refused.text);
    for reply in [&probe, &refused] {
        assert!(!reply.text.contains(secret), "{}", reply.text);
    }
}

/// What the instance at `address` answers over HTTP.
async fn instance_answer(address: &str) -> String {
    crate::support::get(format!("http://{address}/"))
        .await
        .expect("the instance answers")
        .text()
        .await
        .unwrap()
}

async fn aws_instances_against_the_simulator(s: TestServer) {
    let credentials = AwsCredentials {
        access_key_id: "AKIDBULKHEADTEST".into(),
        secret_access_key: "aws-simulator-secret-key-for-tests".into(),
    };
    let sim = AwsSimulator::start(LOOPBACK, "us-east-1", credentials)
        .await
        .unwrap();
    provider_point(
        &s,
        "aws",
        sim.server.addr,
        json!({ "endpoint": sim.url(), "regions": "us-east-1" }),
        json!({ "access_key_id": "AKIDBULKHEADTEST", "secret_access_key": "aws-simulator-secret-key-for-tests" }),
    )
    .await;
    healthy_probe(&s, "aws").await;

    let made = instance_create(&s, "aws", "web-1", "us-east-1").await;
    let made = made.assert_status(201).clone();
    let id = made["provider_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("i-"), "{made}");
    let address = made["address"].as_str().unwrap().to_owned();
    assert!(address.ends_with(":8080"), "{address}");
    // It answers as what the control plane calls it.
    assert!(instance_answer(&address).await.contains("\"web-1\""));

    let again = instance_create(&s, "aws", "web-1", "us-east-1").await;
    assert_eq!(again.assert_status(201)["provider_id"], id.as_str());
    assert_eq!(
        sim.instance_count(),
        1,
        "re-provisioning the same key made no duplicate"
    );
    let view = s
        .get("/v1/providers/aws/instances/web-1", ADMIN_TOKEN)
        .await;
    assert_eq!(view.assert_status(200)["provider_id"], id.as_str());
    let list = s.get("/v1/providers/aws/instances", ADMIN_TOKEN).await;
    let items = list.assert_status(200)["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1);
    s.delete("/v1/providers/aws/instances/web-1", ADMIN_TOKEN)
        .await
        .assert_status(204);
    assert_eq!(sim.instance_count(), 0);
    s.delete("/v1/providers/aws/instances/web-1", ADMIN_TOKEN)
        .await
        .assert_status(204);
    s.get("/v1/providers/aws/instances/web-1", ADMIN_TOKEN)
        .await
        .assert_problem(404, "instance_not_found");

    // Each fault, as the plugin's typed error and the API's answer.
    fault_set(
        &sim.url(),
        FaultState {
            rate_limited_secs: Some(7),
            ..Default::default()
        },
    )
    .await;
    let limited = instance_create(&s, "aws", "web-2", "us-east-1").await;
    limited.assert_problem(503, "provider_rate_limited");
    assert_eq!(limited.header("retry-after"), Some("7"));
    fault_set(
        &sim.url(),
        FaultState {
            failing: true,
            ..Default::default()
        },
    )
    .await;
    instance_create(&s, "aws", "web-2", "us-east-1")
        .await
        .assert_problem(503, "provider_unavailable");
    fault_set(&sim.url(), FaultState::default()).await;
    healthy_probe(&s, "aws").await;

    // A wrong secret: the simulator's signature check refuses it; the breaker opens at once.
    s.patch(
        "/v1/providers/aws",
        ADMIN_TOKEN,
        json!({ "secrets": { "secret_access_key": "not-the-secret" } }),
    )
    .await
    .assert_status(200);
    breaker_opened_by(
        &s,
        "aws",
        "unauthorized",
        "SignatureDoesNotMatch",
        "not-the-secret",
    )
    .await;
    s.patch(
        "/v1/providers/aws",
        ADMIN_TOKEN,
        json!({ "secrets": { "secret_access_key": "aws-simulator-secret-key-for-tests" } }),
    )
    .await
    .assert_status(200);
    healthy_probe(&s, "aws").await;

    // Suspended, as EC2 reports it (`Blocked`).
    fault_set(
        &sim.url(),
        FaultState {
            suspended: true,
            ..Default::default()
        },
    )
    .await;
    breaker_opened_by(
        &s,
        "aws",
        "account suspended",
        "Blocked",
        "aws-simulator-secret",
    )
    .await;
    fault_set(&sim.url(), FaultState::default()).await;
    healthy_probe(&s, "aws").await;
}

async fn gcp_instances_against_the_simulator(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    let made = lifecycle_check(&s, "gcp", GCP_ZONE, "shop/web:1").await;
    // Eight calls (and the probes), one token: the plugin keeps it in the provider's cache
    // between calls instead of exchanging an assertion on each.
    assert_eq!(platform.gcp.tokens_issued(), 1);
    // And the calls share kept-alive connections: one call at a time here (background probes
    // may overlap them), so a few connections carry them all (each call opened its own before
    // the plugin host kept them: 9 to 11 for 12 calls).
    let calls = platform.gcp.faults.calls().total;
    let connections = platform.gcp.connections_accepted();
    assert!(calls >= 8, "{calls} calls");
    assert!(
        connections <= 3,
        "{connections} connections for {calls} calls"
    );
    assert!(
        made["address"].as_str().unwrap().ends_with(":8080"),
        "{made}"
    );
    assert_eq!(platform.gcp.instance_count(), 0);
    let gcp = platform.gcp.url();

    fault_set(
        &gcp,
        FaultState {
            rate_limited_secs: Some(9),
            ..Default::default()
        },
    )
    .await;
    let limited = instance_create(&s, "gcp", "web-2", GCP_ZONE).await;
    limited.assert_problem(503, "provider_rate_limited");
    assert_eq!(limited.header("retry-after"), Some("9"));
    fault_set(
        &gcp,
        FaultState {
            failing: true,
            ..Default::default()
        },
    )
    .await;
    instance_create(&s, "gcp", "web-2", GCP_ZONE)
        .await
        .assert_problem(503, "provider_unavailable");
    fault_set(&gcp, FaultState::default()).await;
    healthy_probe(&s, "gcp").await;

    // A key the account does not have: the simulator's signature check refuses the assertion.
    let (_, other_key) = tokio::task::spawn_blocking(|| {
        bulkhead_simulators::gcp::service_account_generate("intruder@example.com")
    })
    .await
    .unwrap();
    s.patch(
        "/v1/providers/gcp",
        ADMIN_TOKEN,
        json!({ "secrets": { "private_key": other_key } }),
    )
    .await
    .assert_status(200);
    // New secrets, a new cache: the next call exchanges with the new key (and is refused)
    // instead of using the token of the old one.
    breaker_opened_by(&s, "gcp", "unauthorized", "invalid_grant", "PRIVATE KEY").await;

    // Suspended, as Google reports it.
    for (name, update) in platform.provider_updates() {
        if name == "gcp" {
            s.patch(
                "/v1/providers/gcp",
                ADMIN_TOKEN,
                serde_json::to_value(update).unwrap(),
            )
            .await
            .assert_status(200);
        }
    }
    healthy_probe(&s, "gcp").await;
    fault_set(
        &gcp,
        FaultState {
            suspended: true,
            ..Default::default()
        },
    )
    .await;
    breaker_opened_by(&s, "gcp", "account suspended", "suspend", "PRIVATE KEY").await;
    platform.shutdown().await;
}

async fn metal_instances_run_as_processes_on_the_agent(s: TestServer) {
    let (platform, dir) = platform(&s).await;
    let hello = format!("{} hello", env!("CARGO_BIN_EXE_bulkhead"));
    let made = lifecycle_check(&s, "metal", "local", &hello).await;
    assert!(
        made["provider_id"]
            .as_str()
            .unwrap()
            .starts_with(&platform.agent.url()),
        "{made}"
    );

    // As root, the local platform's agent runs each workload as a user of its own.
    assert!(
        real_uid(std::path::Path::new("/proc/self")) == Some(0),
        "this test needs root: it checks that the agent of `bulkhead dev` runs workloads as \
         users of their own, which only root can do (run the tests as root, as CI does)"
    );
    let Isolation::UserPerWorkload(uids) = platform.agent.isolation else {
        panic!("{}", platform.agent_isolation_note());
    };
    s.post(
        "/v1/providers/metal/instances",
        ADMIN_TOKEN,
        json!({ "instance_key": "web-2", "region": "local", "artifact": hello, "port": 8080 }),
    )
    .await
    .assert_status(201);
    let work_dir = dir
        .path()
        .canonicalize()
        .unwrap()
        .join("agent/workloads/web-2");
    let started = Instant::now();
    let runs_as = loop {
        let found = uids_working_in(&work_dir);
        if !found.is_empty() {
            break found;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no process runs in {}",
            work_dir.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        runs_as.iter().all(|uid| *uid != 0 && uids.contains(*uid)),
        "the workload runs as {runs_as:?}, not as a uid of {uids}"
    );
    platform.shutdown().await;
}

/// The real uids of the processes whose working directory is `dir`.
fn uids_working_in(dir: &std::path::Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == dir))
        .filter_map(|entry| real_uid(&entry.path()))
        .collect()
}

/// The real uid of the process of `/proc/PID` (`proc_dir`).
fn real_uid(proc_dir: &std::path::Path) -> Option<u32> {
    let status = std::fs::read_to_string(proc_dir.join("status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn suspending_one_cloud_leaves_the_others_alone(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    fault_set(
        &platform.gcp.url(),
        FaultState {
            suspended: true,
            ..Default::default()
        },
    )
    .await;
    // No call needed: the periodic probes find it.
    let opened_after = state_wait(&s, "gcp", "unavailable").await;
    assert!(opened_after < Duration::from_secs(5), "{opened_after:?}");
    let events = s.get("/v1/providers/gcp/events", ADMIN_TOKEN).await;
    let last = events.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["reason"].as_str().unwrap().contains("suspended"),
        "{last}"
    );

    // The others keep their health and serve calls meanwhile.
    let hello = format!("{} hello", env!("CARGO_BIN_EXE_bulkhead"));
    for (provider, region, artifact) in [
        ("aws", AWS_REGION, "ami-0bulkhead"),
        ("metal", "local", hello.as_str()),
    ] {
        let before = s
            .get(&format!("/v1/providers/{provider}/events"), ADMIN_TOKEN)
            .await;
        let before = before.assert_status(200)["items"].as_array().unwrap().len();
        s.post(
            &format!("/v1/providers/{provider}/instances"),
            ADMIN_TOKEN,
            json!({ "instance_key": "during-outage", "region": region, "artifact": artifact, "port": 8080 }),
        )
        .await
        .assert_status(201);
        assert_eq!(provider_state(&s, provider).await, "healthy");
        let after = s
            .get(&format!("/v1/providers/{provider}/events"), ADMIN_TOKEN)
            .await;
        assert_eq!(
            after.assert_status(200)["items"].as_array().unwrap().len(),
            before,
            "{provider} changed state during another provider's outage"
        );
    }
    instance_create(&s, "gcp", "during-outage", GCP_ZONE)
        .await
        .assert_problem(503, "provider_unavailable");

    fault_set(&platform.gcp.url(), FaultState::default()).await;
    state_wait(&s, "gcp", "healthy").await;
    instance_create(&s, "gcp", "after-outage", GCP_ZONE)
        .await
        .assert_status(201);
    platform.shutdown().await;
}
