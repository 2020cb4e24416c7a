//! Placement by capacity on metal: two real host agents offering little, a service too big for
//! both that waits with a reason (no agent is asked to overcommit), a resize that fits and
//! rolls out make-before-break, and a deployment that waits for room and is placed as soon as
//! another service's instance is removed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bulkhead_agent::{AgentSettings, RunningAgent};
use serde_json::{Value, json};

use crate::db_tests;
use crate::deployments::{deploy, deployment_wait, event_items, events, fixture, live_instances};
use crate::support::{ADMIN_TOKEN, TestServer, eventually, healthy_probe};

db_tests!(a_service_too_big_for_every_metal_machine_waits_with_a_reason_then_fits,);

const AGENT_TOKEN: &str = "capacity-test-agent-token-0001";

/// A host agent offering `cpu_millis` and `memory_mib` to its workloads.
async fn agent_offering(dir: &Path, cpu_millis: u32, memory_mib: u32) -> RunningAgent {
    let mut settings = AgentSettings::new("127.0.0.1:0".parse().unwrap(), dir.into(), AGENT_TOKEN);
    settings.slots = 4;
    settings.cpu_millis = Some(cpu_millis);
    settings.memory_mib = Some(memory_mib);
    // As `bulkhead dev`'s agent: isolated wherever the machine allows it (CI runs as root).
    settings.insecure_same_user = true;
    settings.insecure_shared_network = true;
    settings.insecure_no_limits = true;
    bulkhead_agent::start_in_free_uids(settings)
        .await
        .expect("the agent starts")
}

/// What `agent` says it has: `(cpu_millis_free, memory_mib_free, slots_used)`.
async fn free(agent: &RunningAgent) -> (u64, u64, u64) {
    let capacity: Value = reqwest::Client::new()
        .get(format!("{}/v1/capacity", agent.url()))
        .bearer_auth(AGENT_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let field = |name: &str| capacity[name].as_u64().unwrap();
    (
        field("cpu_millis_free"),
        field("memory_mib_free"),
        field("slots_used"),
    )
}

async fn resize(s: &TestServer, token: &str, service: &str, cpu_millis: u32, memory_mib: u32) {
    s.patch(
        service,
        token,
        json!({"size": {"cpu_millis": cpu_millis, "memory_mib": memory_mib}}),
    )
    .await
    .assert_status(200);
}

async fn a_service_too_big_for_every_metal_machine_waits_with_a_reason_then_fits(s: TestServer) {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = agent_offering(dirs.0.path(), 1000, 1024).await;
    let b = agent_offering(dirs.1.path(), 1500, 1024).await;
    let config = BTreeMap::from([
        ("agents".to_owned(), format!("{},{}", a.url(), b.url())),
        ("regions".to_owned(), "local".to_owned()),
    ]);
    s.patch(
        "/v1/providers/metal",
        ADMIN_TOKEN,
        json!({
            "allowlist": bulkhead::plugins::endpoint_patterns(&config),
            "config": config,
            "secrets": {"agent_token": AGENT_TOKEN},
            "enabled": true,
        }),
    )
    .await
    .assert_status(200);
    healthy_probe(&s, "metal").await;
    let healthy = Duration::from_secs(60);

    // 2000m is more than either machine offers: the deployment waits, saying why, and no
    // agent is given the workload.
    let web = fixture(&s, 1, &["metal"]).await;
    resize(&s, &web.owner, &web.service, 2000, 512).await;
    let v1 = deploy(&s, &web.owner, &web.service).await;
    let v1_id = v1["id"].as_str().unwrap().to_owned();
    let deployment = format!("{}/deployments/{v1_id}", web.service);
    eventually("the deployment says it waits for room", async || {
        let view = s.get(&deployment, &web.owner).await;
        view.body["reason"].as_str().is_some_and(|reason| {
            reason
                == "waiting for room on metal: no machine has 2000m CPU, 512 MiB free now; \
                       placed as soon as one has"
        })
    })
    .await;
    let view = s.get(&deployment, &web.owner).await;
    assert_eq!(view.body["state"], "rolling_out", "{}", view.body);
    let said = events(&s, &web.service, &v1_id).await;
    let waiting: Vec<_> = said
        .iter()
        .filter(|(kind, _)| kind == "instance.waiting")
        .collect();
    assert_eq!(waiting.len(), 1, "said once: {said:?}");
    assert!(
        waiting[0].1.contains("waiting for room on metal") && !waiting[0].1.contains("127.0.0.1"),
        "the size and provider, not the platform's machines: {said:?}"
    );
    assert!(
        !said.iter().any(|(kind, _)| kind == "instance.failed"),
        "{said:?}"
    );
    assert_eq!(free(&a).await, (1000, 1024, 0));
    assert_eq!(free(&b).await, (1500, 1024, 0));

    // Resized to fit: the new deployment supersedes the waiting one and runs on the agent
    // with the most CPU free (b).
    resize(&s, &web.owner, &web.service, 1000, 256).await;
    let v2 = deploy(&s, &web.owner, &web.service).await;
    let v2_id = v2["id"].as_str().unwrap().to_owned();
    deployment_wait(&s, &web.service, &v2_id, "healthy", healthy).await;
    let v1_view = s.get(&deployment, &web.owner).await;
    assert_eq!(v1_view.body["state"], "superseded", "{}", v1_view.body);
    assert_eq!(free(&b).await, (500, 768, 1));

    // Resizing again fits only on a, beside the running instance: make before break. At
    // every sample an instance serves; the old one drains only once the new one is healthy.
    resize(&s, &web.owner, &web.service, 800, 256).await;
    let v3 = deploy(&s, &web.owner, &web.service).await;
    let v3_id = v3["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    loop {
        let view = s
            .get(&format!("{}/deployments/{v3_id}", web.service), ADMIN_TOKEN)
            .await;
        if view.body["state"] == "healthy" {
            break;
        }
        let live = live_instances(&s, &web.service).await;
        assert!(
            live.iter()
                .any(|i| i["state"] == "running" && i["health"] == "healthy"),
            "nothing served during the resize: {live:#?}"
        );
        assert!(started.elapsed() < healthy, "{}", view.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The old instance drained only after the new one was healthy.
    let healthy_at = event_at(&s, &web.service, &v3_id, "instance.healthy").await;
    let draining_at = event_at(&s, &web.service, &v2_id, "deployment.superseded").await;
    assert!(healthy_at <= draining_at, "{healthy_at} > {draining_at}");
    eventually("the resized-away instance leaves b", async || {
        free(&b).await == (1500, 1024, 0)
    })
    .await;
    assert_eq!(free(&a).await, (200, 768, 1));

    // Another project's service takes b whole; then web at 1000m fits nowhere (a has 200m
    // beside its own 800m) and waits, until the other service is scaled to nothing: the
    // removal of its instance frees the room and web is placed at once, well before the
    // 30 s retry.
    let other = fixture(&s, 1, &["metal"]).await;
    resize(&s, &other.owner, &other.service, 1500, 512).await;
    let made = deploy(&s, &other.owner, &other.service).await;
    deployment_wait(
        &s,
        &other.service,
        made["id"].as_str().unwrap(),
        "healthy",
        healthy,
    )
    .await;
    resize(&s, &web.owner, &web.service, 1000, 256).await;
    let v4 = deploy(&s, &web.owner, &web.service).await;
    let v4_id = v4["id"].as_str().unwrap().to_owned();
    let v4_path = format!("{}/deployments/{v4_id}", web.service);
    eventually("web waits for room", async || {
        s.get(&v4_path, &web.owner).await.body["reason"]
            .as_str()
            .is_some_and(|reason| reason.starts_with("waiting for room on metal"))
    })
    .await;
    s.patch(&other.service, &other.owner, json!({"replicas": 0}))
        .await
        .assert_status(200);
    let freed = Instant::now();
    deploy(&s, &other.owner, &other.service).await;
    let done = deployment_wait(&s, &web.service, &v4_id, "healthy", healthy).await;
    let took = freed.elapsed();
    eprintln!("placed {took:?} after the other service was scaled to nothing");
    assert!(
        took < Duration::from_secs(20),
        "placed when the room freed, not at the next retry: {took:?}"
    );
    assert_eq!(done["reason"], "", "{done}");
    let live = live_instances(&s, &web.service).await;
    assert!(
        live.iter().all(|i| i["deployment_id"] == v4_id.as_str()
            || !["running", "starting"].contains(&i["state"].as_str().unwrap())),
        "{live:#?}"
    );
    for agent in [a, b] {
        agent.shutdown_and_stop_workloads().await;
    }
}

/// When the first event of `kind` of deployment `id` happened.
async fn event_at(
    s: &TestServer,
    service: &str,
    id: &str,
    kind: &str,
) -> chrono::DateTime<chrono::Utc> {
    let items = event_items(s, service, id).await;
    items
        .iter()
        .find(|event| event["kind"] == kind)
        .and_then(|event| event["created_at"].as_str())
        .unwrap_or_else(|| panic!("no {kind} event: {items:#?}"))
        .parse()
        .unwrap()
}
