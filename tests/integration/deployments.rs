//! The deploy pipeline end to end, through the real server, against the GCP and AWS simulators
//! and a host agent: deployments spread over three providers whose instances answer, failover
//! when a cloud is suspended mid-rollout, cancel and rollback, a rollout that never becomes
//! healthy leaving the old version serving, event streams that resume without gaps, the
//! `deploy` scope, evacuation, and backpressure (concurrency, pause, drain rate, rate limits,
//! turns shared fairly between projects).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use bulkhead::dev::DevPlatform;
use bulkhead_simulators::faults::FaultState;

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, Backend, TestServer, database_fresh, eventually, platform};

db_tests!(
    a_deployment_spreads_over_three_providers_and_answers,
    a_suspended_cloud_fails_over_mid_rollout,
    cancel_rollback_and_a_rollout_that_never_gets_healthy,
    an_event_stream_resumes_after_its_last_event,
    a_stream_wakes_only_for_its_own_deployment,
    a_deploy_token_deploys_and_does_nothing_else,
    evacuating_a_provider_moves_its_instances_make_before_break,
);

/// A workload that answers `GET /` with its `SECRET_TOKEN` and `GET /fail` with 500: on the
/// metal provider it runs as a process; the clouds' simulators serve their own answer.
const WORKLOAD: &str = "import os,http.server as h\nclass H(h.BaseHTTPRequestHandler):\n def do_GET(s):\n  s.send_response(500 if s.path=='/fail' else 200); s.end_headers(); s.wfile.write(os.environ.get('SECRET_TOKEN','-').encode())\n def log_message(s,*a): pass\nh.HTTPServer(('127.0.0.1',int(os.environ['PORT'])),H).serve_forever()";

pub struct Fixture {
    pub owner: String,
    pub project: String,
    /// `/v1/projects/{p}/services/{s}`.
    pub service: String,
}

/// A project with a service of `replicas` on `providers`, checked every 200 ms.
pub async fn fixture(s: &TestServer, replicas: u32, providers: &[&str]) -> Fixture {
    fixture_running(s, replicas, providers, WORKLOAD, "/").await
}

/// [`fixture`] with the Python program `workload`, health-checked on `health_path`.
pub async fn fixture_running(
    s: &TestServer,
    replicas: u32,
    providers: &[&str],
    workload: &str,
    health_path: &str,
) -> Fixture {
    let made = s
        .project_with_service_of(
            "shop",
            json!({
                "name": "web",
                "source": { "type": "command", "command": ["python3", "-c", workload] },
                "port": 8080,
                "replicas": replicas,
                "variables": [{ "name": "SECRET_TOKEN", "value": "tok-3f9a1c", "secret": true }],
                "placement": { "providers": providers.iter().map(|p| json!({ "name": p })).collect::<Vec<_>>() },
                "health_check": { "path": health_path, "interval_ms": 200, "timeout_ms": 1000, "start_timeout_secs": 30 },
            }),
        )
        .await;
    Fixture {
        owner: made.owner,
        service: format!("/v1/projects/{}/services/{}", made.id, made.service),
        project: made.id,
    }
}

pub async fn deploy(s: &TestServer, token: &str, service: &str) -> Value {
    let made = s
        .call(
            Method::POST,
            &format!("{service}/deployments"),
            Some(token),
            None,
        )
        .await;
    made.assert_status(201).clone()
}

/// Rolls back from deployment `id` of `service` as `token`: the new deployment (201).
pub async fn rollback(s: &TestServer, token: &str, service: &str, id: &str) -> Value {
    let made = s
        .call(
            Method::POST,
            &format!("{service}/deployments/{id}/rollback"),
            Some(token),
            None,
        )
        .await;
    made.assert_status(201).clone()
}

/// Polls a deployment until it is in `state` (at most `within`); returns it.
pub async fn deployment_wait(
    s: &TestServer,
    service: &str,
    id: &str,
    state: &str,
    within: Duration,
) -> Value {
    let started = Instant::now();
    loop {
        let view = s
            .get(&format!("{service}/deployments/{id}"), ADMIN_TOKEN)
            .await;
        let view = view.assert_status(200).clone();
        if view["state"] == state {
            return view;
        }
        if started.elapsed() > within {
            let events = s
                .get(&format!("{service}/deployments/{id}/events"), ADMIN_TOKEN)
                .await;
            panic!(
                "deployment not {state} within {within:?}: {view:#}\nevents: {:#}",
                events.body["items"]
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A deployment's events, in their order.
pub(crate) async fn event_items(s: &TestServer, service: &str, id: &str) -> Vec<Value> {
    let page = s
        .get(
            &format!("{service}/deployments/{id}/events?limit=200"),
            ADMIN_TOKEN,
        )
        .await;
    page.assert_status(200)["items"].as_array().unwrap().clone()
}

/// The kinds and messages of a deployment's events.
pub(crate) async fn events(s: &TestServer, service: &str, id: &str) -> Vec<(String, String)> {
    event_items(s, service, id)
        .await
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The service's instances that are not removed.
pub(crate) async fn live_instances(s: &TestServer, service: &str) -> Vec<Value> {
    let page = s.get(&format!("{service}/instances"), ADMIN_TOKEN).await;
    page.assert_status(200)["items"].as_array().unwrap().clone()
}

async fn answer(address: &str) -> String {
    crate::support::get(format!("http://{address}/"))
        .await
        .unwrap_or_else(|err| panic!("{address} does not answer: {err}"))
        .text()
        .await
        .unwrap()
}

/// Waits until `check` holds (at most 30 s).
async fn a_deployment_spreads_over_three_providers_and_answers(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let f = fixture(&s, 3, &["gcp", "aws", "metal"]).await;
    let made = deploy(&s, &f.owner, &f.service).await;
    assert_eq!(made["state"], "queued");
    assert_eq!(made["number"], 1);
    assert!(!made.to_string().contains("tok-3f9a1c"), "{made}");
    let id = made["id"].as_str().unwrap();
    let healthy = deployment_wait(&s, &f.service, id, "healthy", Duration::from_secs(60)).await;
    let instances = healthy["instances"].as_array().unwrap();
    let providers: BTreeSet<&str> = instances
        .iter()
        .map(|i| i["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, BTreeSet::from(["aws", "gcp", "metal"]));
    for instance in instances {
        assert_eq!(instance["state"], "running");
        assert_eq!(instance["health"], "healthy");
        let address = instance["address"].as_str().unwrap();
        let body = answer(address).await;
        if instance["provider"] == "metal" {
            // The secret reached the workload's environment (and only there).
            assert_eq!(body, "tok-3f9a1c");
        }
    }
    let events = events(&s, &f.service, id).await;
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    for kind in [
        "deployment.queued",
        "instance.placed",
        "instance.started",
        "instance.healthy",
        "deployment.healthy",
    ] {
        assert!(kinds.contains(&kind), "{kind} not in {kinds:?}");
    }
    let all = format!("{events:?}");
    assert!(!all.contains("tok-3f9a1c"), "a secret in the events");
    assert_eq!(live_instances(&s, &f.service).await.len(), 3);
    // The deployment list has it, without instances.
    let list = s.get(&format!("{}/deployments", f.service), &f.owner).await;
    assert_eq!(list.assert_status(200)["items"][0]["state"], "healthy");
    assert!(list.body["items"][0].get("instances").is_none());

    // A new version rolls out make-before-break: the old instances go only once the new are
    // healthy, and are removed at their providers.
    s.patch(&f.service, &f.owner, json!({ "replicas": 2 }))
        .await
        .assert_status(200);
    let second = deploy(&s, &f.owner, &f.service).await;
    let second_id = second["id"].as_str().unwrap();
    deployment_wait(
        &s,
        &f.service,
        second_id,
        "healthy",
        Duration::from_secs(60),
    )
    .await;
    let first = deployment_wait(&s, &f.service, id, "superseded", Duration::from_secs(5)).await;
    assert!(first["reason"].as_str().unwrap().contains("#2"), "{first}");
    eventually("the old instances are removed", async || {
        let live = live_instances(&s, &f.service).await;
        live.len() == 2 && live.iter().all(|i| i["deployment_id"] == second_id)
    })
    .await;
    // Removed at the providers too: the simulators and the agent hold just the new ones.
    let held = held_at_providers(&s).await;
    assert_eq!(held, 2, "instances held by the providers");
    // Make-before-break, in the order things happened: both new instances were healthy
    // before the new deployment was, and nothing of the old one was drained or removed before.
    let new_events = events_timed(&s, &f.service, second_id).await;
    let old_events = events_timed(&s, &f.service, id).await;
    let healthy_at = new_events
        .iter()
        .find(|(kind, _)| kind == "deployment.healthy")
        .map(|(_, at)| *at)
        .expect("the new deployment's healthy event");
    let new_healthy = new_events
        .iter()
        .filter(|(kind, at)| kind == "instance.healthy" && *at <= healthy_at)
        .count();
    assert_eq!(
        new_healthy, 2,
        "new instances healthy before the switch: {new_events:?}"
    );
    let breaking = [
        "deployment.superseded",
        "instance.draining",
        "instance.removing",
        "instance.removed",
    ];
    let first_break = old_events
        .iter()
        .filter(|(kind, _)| breaking.contains(&kind.as_str()))
        .map(|(_, at)| *at)
        .min()
        .expect("the old deployment was superseded and removed");
    assert!(
        first_break >= healthy_at,
        "an old instance went at {first_break} before the new deployment was healthy at {healthy_at}: {old_events:?}"
    );
    let removed = old_events
        .iter()
        .filter(|(kind, _)| kind == "instance.removed")
        .count();
    assert_eq!(
        removed, 3,
        "each old instance's removal is recorded: {old_events:?}"
    );
}

/// The kinds and times of a deployment's events, in their order.
async fn events_timed(
    s: &TestServer,
    service: &str,
    id: &str,
) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
    event_items(s, service, id)
        .await
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["created_at"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// Instances the providers report (through their plugins' `list`), across gcp, aws and metal.
async fn held_at_providers(s: &TestServer) -> usize {
    let mut held = 0;
    for provider in ["gcp", "aws", "metal"] {
        let list = s
            .get(&format!("/v1/providers/{provider}/instances"), ADMIN_TOKEN)
            .await;
        held += list.assert_status(200)["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["state"] != "stopped")
            .count();
    }
    held
}

async fn a_suspended_cloud_fails_over_mid_rollout(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    let f = fixture(&s, 3, &["gcp", "aws", "metal"]).await;
    // GCP answers slowly, then its account is suspended while the rollout is under way.
    platform.gcp.faults.set(FaultState {
        latency_ms: 1500,
        ..FaultState::default()
    });
    let made = deploy(&s, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    platform.gcp.faults.set(FaultState {
        suspended: true,
        ..FaultState::default()
    });
    let healthy = deployment_wait(&s, &f.service, id, "healthy", Duration::from_secs(60)).await;
    let serving: Vec<&Value> = healthy["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["state"] == "running")
        .collect();
    assert_eq!(serving.len(), 3);
    let providers: BTreeSet<&str> = serving
        .iter()
        .map(|i| i["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, BTreeSet::from(["aws", "metal"]), "{healthy:#}");
    let events = events(&s, &f.service, id).await;
    let failover = events
        .iter()
        .find(|(kind, _)| kind == "instance.failover")
        .unwrap_or_else(|| panic!("no failover event: {events:?}"));
    assert!(failover.1.contains("from gcp"), "{failover:?}");
    assert!(
        failover.1.contains("account_suspended") || failover.1.contains("unavailable"),
        "{failover:?}"
    );
    // The failed instance leaves nothing behind at GCP once it recovers.
    platform.gcp.faults.set(FaultState::default());
    eventually("the refused instance is removed", async || {
        s.get(&format!("{}/deployments/{id}", f.service), ADMIN_TOKEN)
            .await
            .body["instances"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["provider"] != "gcp" || i["state"] == "removed")
    })
    .await;
}

async fn cancel_rollback_and_a_rollout_that_never_gets_healthy(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    let f = fixture(&s, 2, &["aws", "metal"]).await;
    let v1 = deploy(&s, &f.owner, &f.service).await;
    let v1_id = v1["id"].as_str().unwrap().to_owned();
    deployment_wait(&s, &f.service, &v1_id, "healthy", Duration::from_secs(60)).await;
    let serving_v1: Vec<String> = live_instances(&s, &f.service)
        .await
        .iter()
        .map(|i| i["instance_key"].as_str().unwrap().to_owned())
        .collect();

    // v2's health check cannot pass: its rollout fails and v1 keeps serving.
    s.patch(
        &f.service,
        &f.owner,
        json!({ "health_check": { "path": "/fail", "interval_ms": 200, "start_timeout_secs": 3 } }),
    )
    .await
    .assert_status(200);
    let v2 = deploy(&s, &f.owner, &f.service).await;
    let v2_id = v2["id"].as_str().unwrap().to_owned();
    let failed = deployment_wait(&s, &f.service, &v2_id, "failed", Duration::from_secs(60)).await;
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .contains("previous version keeps serving"),
        "{failed}"
    );
    eventually("v2's instances are removed", async || {
        live_instances(&s, &f.service)
            .await
            .iter()
            .all(|i| i["deployment_id"] == v1_id.as_str())
    })
    .await;
    let live = live_instances(&s, &f.service).await;
    assert_eq!(live.len(), 2);
    for instance in &live {
        assert!(serving_v1.contains(&instance["instance_key"].as_str().unwrap().to_owned()));
        assert_eq!(instance["health"], "healthy");
        answer(instance["address"].as_str().unwrap()).await;
    }
    let v1_now = s
        .get(&format!("{}/deployments/{v1_id}", f.service), ADMIN_TOKEN)
        .await;
    assert_eq!(v1_now.body["state"], "healthy");

    // Roll back from v2: a new deployment of v1's spec.
    let rollback = rollback(&s, &f.owner, &f.service, &v2_id).await;
    assert_eq!(rollback["rollback_of"], v1_id.as_str());
    assert_eq!(rollback["spec"]["health_check"]["path"], "/");
    let rollback_id = rollback["id"].as_str().unwrap().to_owned();
    deployment_wait(
        &s,
        &f.service,
        &rollback_id,
        "healthy",
        Duration::from_secs(60),
    )
    .await;
    // Nothing to roll back to before the first deployment.
    s.call(
        Method::POST,
        &format!("{}/deployments/{v1_id}/rollback", f.service),
        Some(&f.owner),
        None,
    )
    .await
    .assert_problem(409, "no_healthy_deployment");

    // Cancel a slow rollout: it stops, its instances are removed; cancelling again is fine.
    platform.aws.faults.set(FaultState {
        latency_ms: 2000,
        ..FaultState::default()
    });
    s.patch(
        &f.service,
        &f.owner,
        json!({ "placement": { "providers": [{ "name": "aws" }] } }),
    )
    .await
    .assert_status(200);
    let v4 = deploy(&s, &f.owner, &f.service).await;
    let v4_id = v4["id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let cancel = format!("{}/deployments/{v4_id}/cancel", f.service);
    let cancelled = s.call(Method::POST, &cancel, Some(&f.owner), None).await;
    assert_eq!(cancelled.assert_status(200)["state"], "cancelled");
    let again = s.call(Method::POST, &cancel, Some(&f.owner), None).await;
    assert_eq!(again.assert_status(200)["state"], "cancelled");
    platform.aws.faults.set(FaultState::default());
    eventually(
        "the cancelled deployment's instances are removed",
        async || {
            let view = s
                .get(&format!("{}/deployments/{v4_id}", f.service), ADMIN_TOKEN)
                .await;
            view.body["instances"]
                .as_array()
                .unwrap()
                .iter()
                .all(|i| i["state"] == "removed")
        },
    )
    .await;
    // The rollback's instances kept serving throughout (v1's may still be on their way out).
    let live = live_instances(&s, &f.service).await;
    let running: Vec<&Value> = live.iter().filter(|i| i["state"] == "running").collect();
    assert_eq!(running.len(), 2, "{live:#?}");
    assert!(
        running
            .iter()
            .all(|i| i["deployment_id"] == rollback_id.as_str()),
        "{live:#?}"
    );
    // A finished deployment cannot be cancelled.
    s.call(
        Method::POST,
        &format!("{}/deployments/{rollback_id}/cancel", f.service),
        Some(&f.owner),
        None,
    )
    .await
    .assert_problem(409, "deployment_finished");
}

/// Reads an event stream until `count` events arrived (or it ended); returns their ids.
async fn stream_read(
    s: &TestServer,
    url: &str,
    last_event_id: Option<i64>,
    count: usize,
) -> (Vec<i64>, bool) {
    let mut request = s
        .http
        .get(s.url(url))
        .bearer_auth(ADMIN_TOKEN)
        .header("accept", "text/event-stream");
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last.to_string());
    }
    let mut response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut ids = Vec::new();
    let mut buffer = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let chunk = tokio::time::timeout_at(deadline.into(), response.chunk())
            .await
            .expect("the stream goes on");
        let Some(chunk) = chunk.unwrap() else {
            return (ids, true);
        };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            if let Some(id) = frame.lines().find_map(|line| line.strip_prefix("id:")) {
                ids.push(id.trim().parse().unwrap());
                if ids.len() == count {
                    return (ids, false);
                }
            }
        }
    }
}

async fn an_event_stream_resumes_after_its_last_event(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let f = fixture(&s, 2, &["aws", "metal"]).await;
    let made = deploy(&s, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    let url = format!("{}/deployments/{id}/events", f.service);
    // A client reads three events and drops the connection...
    let (first, ended) = stream_read(&s, &url, None, 3).await;
    assert_eq!(first, [1, 2, 3]);
    assert!(!ended);
    // ... and resumes after the last one it saw, until the deployment is done.
    let (rest, ended) = stream_read(&s, &url, Some(3), usize::MAX).await;
    assert!(ended, "the stream ends once the deployment has finished");
    let all: Vec<i64> = first.into_iter().chain(rest).collect();
    let listed = events(&s, &f.service, id).await;
    assert_eq!(
        all,
        (1..=listed.len() as i64).collect::<Vec<_>>(),
        "no event missed or repeated"
    );
    assert!(listed.iter().any(|(kind, _)| kind == "deployment.healthy"));
    // The list pages by `after`.
    let page = s.get(&format!("{url}?after=2&limit=2"), ADMIN_TOKEN).await;
    let seqs: Vec<i64> = page.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 4]);
    assert_eq!(page.body["next_after"], 4);
    s.get(&format!("{url}?limit=0"), ADMIN_TOKEN)
        .await
        .assert_problem(400, "invalid_query");
    TestServer::send(
        s.request(Method::GET, &url, Some(ADMIN_TOKEN))
            .header("accept", "text/event-stream")
            .header("last-event-id", "yesterday"),
    )
    .await
    .assert_problem(400, "invalid_header");
}

async fn a_stream_wakes_only_for_its_own_deployment(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    s.post(
        "/v1/deploy-pipeline/pause",
        ADMIN_TOKEN,
        json!({ "reason": "streams" }),
    )
    .await
    .assert_status(200);
    let followed = fixture(&s, 1, &["metal"]).await;
    let other = fixture(&s, 1, &["metal"]).await;
    let made = deploy(&s, &followed.owner, &followed.service).await;
    let id = made["id"].as_str().unwrap().to_owned();
    let url = format!("{}/deployments/{id}/events", followed.service);
    let mut stream = s
        .http
        .get(s.url(&url))
        .bearer_auth(ADMIN_TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    while !seen.contains("deployment.queued") {
        seen.push_str(&String::from_utf8_lossy(
            &stream.chunk().await.unwrap().unwrap(),
        ));
    }
    // Settled: the stream has read what there is.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let reads = s.app().deployment_watch.reads();
    // Another tenant's deployments change for three seconds: this stream reads nothing (it
    // used to read every time, and every second).
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let made = deploy(&s, &other.owner, &other.service).await;
        let cancel = format!(
            "{}/deployments/{}/cancel",
            other.service,
            made["id"].as_str().unwrap()
        );
        s.call(Method::POST, &cancel, Some(&other.owner), None)
            .await
            .assert_status(200);
    }
    assert_eq!(
        s.app().deployment_watch.reads(),
        reads,
        "the stream read its events when another deployment changed"
    );
    // Its own deployment changes: it wakes and sends the change at once. (It goes on: the
    // pipeline is paused, and the placed instance is still to be removed.)
    let cancel = format!("{}/deployments/{id}/cancel", followed.service);
    s.call(Method::POST, &cancel, Some(&followed.owner), None)
        .await
        .assert_status(200);
    let told = tokio::time::timeout(Duration::from_secs(5), async {
        while !seen.contains("deployment.cancelled") {
            let chunk = stream.chunk().await.unwrap().expect("the stream goes on");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(told.is_ok(), "the cancellation was not streamed: {seen}");
    assert!(s.app().deployment_watch.reads() > reads);
}

async fn a_deploy_token_deploys_and_does_nothing_else(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let f = fixture(&s, 1, &["metal"]).await;
    let token = s
        .post(
            "/v1/tokens",
            &f.owner,
            json!({ "name": "ci", "scopes": ["deploy"] }),
        )
        .await;
    let token = token.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let made = deploy(&s, &token, &f.service).await;
    let id = made["id"].as_str().unwrap();
    // It may follow its deployment...
    s.get(&format!("{}/deployments/{id}", f.service), &token)
        .await
        .assert_status(200);
    s.get(&format!("{}/deployments/{id}/events", f.service), &token)
        .await
        .assert_status(200);
    s.get(&format!("{}/instances", f.service), &token)
        .await
        .assert_status(200);
    deployment_wait(&s, &f.service, id, "healthy", Duration::from_secs(60)).await;
    // ... and cancel or roll back, but not change or read the service, nor anything else.
    s.patch(&f.service, &token, json!({ "replicas": 5 }))
        .await
        .assert_problem(403, "insufficient_scope");
    s.get(&f.service, &token)
        .await
        .assert_problem(403, "insufficient_scope");
    s.post(
        &format!("/v1/projects/{}/environments", f.project),
        &token,
        json!({ "name": "x" }),
    )
    .await
    .assert_problem(403, "insufficient_scope");
    s.get("/v1/providers", &token)
        .await
        .assert_problem(403, "insufficient_scope");
    // Another tenant's deploy token sees nothing of this project.
    let other = s.user_with_session("other-tenant@example.com").await;
    let other_token = s
        .post(
            "/v1/tokens",
            &other,
            json!({ "name": "ci", "scopes": ["deploy"] }),
        )
        .await;
    let other_token = other_token.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    s.call(
        Method::POST,
        &format!("{}/deployments", f.service),
        Some(&other_token),
        None,
    )
    .await
    .assert_problem(404, "not_found");
    s.get(
        &format!("{}/deployments/{id}/events", f.service),
        &other_token,
    )
    .await
    .assert_problem(404, "not_found");
    // A viewer may read deployments but not deploy.
    let viewer = s.user_with_session("viewer-deployer@example.com").await;
    s.member_add(&f.project, "viewer-deployer@example.com", "viewer")
        .await;
    s.get(&format!("{}/deployments", f.service), &viewer)
        .await
        .assert_status(200);
    s.call(
        Method::POST,
        &format!("{}/deployments", f.service),
        Some(&viewer),
        None,
    )
    .await
    .assert_problem(403, "forbidden");
}

async fn evacuating_a_provider_moves_its_instances_make_before_break(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let f = fixture(&s, 2, &["aws", "metal"]).await;
    let made = deploy(&s, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    deployment_wait(&s, &f.service, id, "healthy", Duration::from_secs(60)).await;
    let on_aws: Vec<String> = live_instances(&s, &f.service)
        .await
        .iter()
        .filter(|i| i["provider"] == "aws")
        .map(|i| i["instance_key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(on_aws.len(), 1);
    // Only administrators evacuate.
    s.call(
        Method::POST,
        "/v1/providers/aws/evacuation",
        Some(&f.owner),
        None,
    )
    .await
    .assert_problem(403, "forbidden");
    let started = s
        .call(
            Method::POST,
            "/v1/providers/aws/evacuation",
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
    assert_eq!(started.assert_status(201)["state"], "running");
    assert_eq!(started.body["total"], 1);
    s.call(
        Method::POST,
        "/v1/providers/aws/evacuation",
        Some(ADMIN_TOKEN),
        None,
    )
    .await
    .assert_problem(409, "evacuation_running");
    eventually("the evacuation is done", async || {
        s.get("/v1/providers/aws/evacuation", ADMIN_TOKEN)
            .await
            .body["state"]
            == "done"
    })
    .await;
    eventually("nothing is left on aws", async || {
        let live = live_instances(&s, &f.service).await;
        live.len() == 2
            && live
                .iter()
                .all(|i| i["provider"] == "metal" && i["health"] == "healthy")
    })
    .await;
    let done = s.get("/v1/providers/aws/evacuation", ADMIN_TOKEN).await;
    assert_eq!(done.body["moved"], 1);
    assert_eq!(done.body["unremoved"], json!([]));
    let events = events(&s, &f.service, id).await;
    let replacement = events
        .iter()
        .find(|(kind, _)| kind == "instance.replacement")
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(replacement.1.contains(&on_aws[0]), "{replacement:?}");
    // The order: the replacement was healthy before the old one drained.
    let healthy_at = events
        .iter()
        .rposition(|(k, m)| k == "instance.healthy" && !m.contains(&on_aws[0]))
        .unwrap();
    let drained_at = events
        .iter()
        .position(|(k, m)| k == "instance.draining" && m.contains(&on_aws[0]))
        .unwrap();
    assert!(healthy_at < drained_at, "{events:?}");
}

/// A server for the backpressure tests: only aws, with probes rare enough not to count.
async fn backpressure_server(concurrency: usize) -> (TestServer, DevPlatform, tempfile::TempDir) {
    let (url, dir) = database_fresh(Backend::Sqlite).await.unwrap();
    let s = TestServer::start_on(Backend::Sqlite, url, dir, |settings| {
        settings.deploy.concurrency = concurrency;
        settings.deploy.provider_rate = 10_000;
        settings.provider_probe_interval = Duration::from_secs(3600);
        // Backlogs of hundreds of services in one project, past the default limit.
        settings.limits.services_per_project = 10_000;
    })
    .await;
    let (platform, dir) = platform(&s).await;
    (s, platform, dir)
}

/// `count` services with one replica on aws each, their health checks slow so that the
/// simulators' instances do not all answer at once.
async fn services_on_aws(s: &TestServer, count: usize) -> (String, Vec<String>) {
    services_on_aws_of(s, "backlog", count).await
}

/// [`services_on_aws`] in a project `name` of a user of its own.
async fn services_on_aws_of(s: &TestServer, name: &str, count: usize) -> (String, Vec<String>) {
    let owner = s.user_with_session(&format!("{name}@example.com")).await;
    let project = s.project_create(&owner, name).await;
    let environment = s
        .post(
            &format!("/v1/projects/{project}/environments"),
            &owner,
            json!({ "name": "production" }),
        )
        .await;
    let environment = environment.assert_status(201)["id"].clone();
    let mut services = Vec::new();
    for n in 0..count {
        let service = s
            .post(
                &format!("/v1/projects/{project}/services"),
                &owner,
                json!({
                    "environment_id": environment, "name": format!("svc-{n}"), "port": 8080,
                    "source": { "type": "artifact", "image": "ami-0bulkhead" },
                    "placement": { "providers": [{ "name": "aws" }] },
                    "health_check": { "interval_ms": 1000, "start_timeout_secs": 600 },
                }),
            )
            .await;
        let id = service.assert_status(201)["id"]
            .as_str()
            .unwrap()
            .to_owned();
        services.push(format!("/v1/projects/{project}/services/{id}"));
    }
    (owner, services)
}

async fn healthy_count(s: &TestServer, deployments: &[(String, String)]) -> usize {
    let mut healthy = 0;
    for (service, id) in deployments {
        if s.get(&format!("{service}/deployments/{id}"), ADMIN_TOKEN)
            .await
            .body["state"]
            == "healthy"
        {
            healthy += 1;
        }
    }
    healthy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_500_never_exceeds_the_concurrency_limit_and_drains() {
    let (s, platform, _dir) = backpressure_server(8).await;
    platform.aws.faults.set(FaultState {
        latency_ms: 30,
        ..FaultState::default()
    });
    let (owner, services) = services_on_aws(&s, 500).await;
    platform.aws.faults.calls_reset();
    let mut deployments = Vec::new();
    for service in &services {
        let made = deploy(&s, &owner, service).await;
        deployments.push((service.clone(), made["id"].as_str().unwrap().to_owned()));
    }
    let started = Instant::now();
    while platform.aws.instance_count() < 500 {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "only {} instances",
            platform.aws.instance_count()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let calls = platform.aws.faults.calls();
    assert!(
        calls.max_in_flight <= 8,
        "{} calls at once",
        calls.max_in_flight
    );
    assert!(
        calls.max_in_flight >= 4,
        "the limit was not used: {}",
        calls.max_in_flight
    );
    let status = s.get("/v1/deploy-pipeline", ADMIN_TOKEN).await;
    assert_eq!(status.assert_status(200)["reconciler"]["concurrency"], 8);
    eventually("every deployment is healthy", async || {
        healthy_count(&s, &deployments).await == 500
    })
    .await;
    // Exactly one instance per deployment, at the provider too.
    assert_eq!(platform.aws.instance_count(), 500);
}

/// One project's backlog does not hold another project's single deployment: with one
/// operation at a time and a slow provider, a deployment queued behind another project's 100
/// is provisioned second, not 101st.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_deploy_waits_one_turn_behind_another_projects_backlog() {
    let (s, platform, _dir) = backpressure_server(1).await;
    let (busy_owner, busy) = services_on_aws_of(&s, "busy", 100).await;
    let (quiet_owner, quiet) = services_on_aws_of(&s, "quiet", 1).await;
    s.post(
        "/v1/deploy-pipeline/pause",
        ADMIN_TOKEN,
        json!({ "reason": "a backlog builds" }),
    )
    .await
    .assert_status(200);
    for service in &busy {
        deploy(&s, &busy_owner, service).await;
    }
    deploy(&s, &quiet_owner, &quiet[0]).await;
    // Every instance is placed (and has its turn) before anything is provisioned.
    eventually("101 instances wait", async || {
        let status = s.get("/v1/deploy-pipeline", ADMIN_TOKEN).await;
        status.body["reconciler"]["queue_depth"] == 101
    })
    .await;
    platform.aws.faults.set(FaultState {
        latency_ms: 100,
        ..FaultState::default()
    });
    s.call(
        Method::POST,
        "/v1/deploy-pipeline/resume",
        Some(ADMIN_TOKEN),
        None,
    )
    .await
    .assert_status(200);
    let started = Instant::now();
    let provisioned_before = loop {
        let instances = s.get(&format!("{}/instances", quiet[0]), ADMIN_TOKEN).await;
        let state = instances.assert_status(200)["items"][0]["state"].clone();
        if state != "pending" && state != "provisioning" {
            break platform.aws.instance_count();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never provisioned; {} others were",
            platform.aws.instance_count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Its own, the busy project's head, and at most what went while this test looked.
    assert!(
        provisioned_before <= 4,
        "{provisioned_before} instances were provisioned by the time the quiet project's was"
    );
    assert!(platform.aws.faults.calls().max_in_flight <= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_new_work_and_resume_drains_at_the_set_rate() {
    let (s, platform, _dir) = backpressure_server(8).await;
    let (owner, services) = services_on_aws(&s, 12).await;
    let untouched = s.get("/v1/deploy-pipeline", ADMIN_TOKEN).await;
    assert_eq!(untouched.assert_status(200)["paused"], false);
    assert!(untouched.body["updated_at"].is_null(), "{}", untouched.text);
    let paused = s
        .post(
            "/v1/deploy-pipeline/pause",
            ADMIN_TOKEN,
            json!({ "reason": "cloud outage" }),
        )
        .await;
    assert_eq!(paused.assert_status(200)["paused"], true);
    let changed: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(paused.body["updated_at"].clone()).unwrap();
    assert!(chrono::Utc::now() - changed < chrono::TimeDelta::seconds(60));
    s.patch(
        "/v1/deploy-pipeline",
        ADMIN_TOKEN,
        json!({ "drain_rate": 4.0 }),
    )
    .await
    .assert_status(200);
    platform.aws.faults.calls_reset();
    for service in &services {
        deploy(&s, &owner, service).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(platform.aws.faults.calls().total, 0, "calls while paused");
    let status = s.get("/v1/deploy-pipeline", ADMIN_TOKEN).await;
    assert_eq!(
        status.body["reconciler"]["queue_depth"], 12,
        "{}",
        status.text
    );
    assert_eq!(status.body["reason"], "cloud outage");
    // Non-administrators see nothing of it.
    s.post("/v1/deploy-pipeline/pause", &owner, json!({}))
        .await
        .assert_problem(403, "forbidden");
    s.call(
        Method::POST,
        "/v1/deploy-pipeline/resume",
        Some(ADMIN_TOKEN),
        None,
    )
    .await
    .assert_status(200);
    eventually("the backlog drains", async || {
        platform.aws.instance_count() == 12
    })
    .await;
    // Each provision starts with a RunInstances call; at 4 a second, 12 take about 3 s.
    let starts: Vec<u64> = platform
        .aws
        .faults
        .calls()
        .starts
        .iter()
        .map(|(at, _)| *at)
        .collect();
    let first = starts[0];
    let span = starts.iter().max().unwrap() - first;
    assert!(span >= 2000, "12 operations at 4/s took only {span} ms");
    // ... and not much more: operations held back by the rate go when it allows, not at the
    // reconciler's next tick (which made it one a second).
    assert!(span <= 5000, "12 operations at 4/s took {span} ms");
    for window_start in &starts {
        let in_second = starts
            .iter()
            .filter(|at| **at >= *window_start && **at < window_start + 1000)
            .count();
        // A provision makes one call here; at most 4 starts (plus one of the next second's)
        assert!(
            in_second <= 5,
            "{in_second} calls within a second: {starts:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_provider_is_not_called_before_its_retry_after() {
    let (s, platform, _dir) = backpressure_server(8).await;
    // Two: each refusal counts against the provider's breaker, and three in a row would open it.
    let (owner, services) = services_on_aws(&s, 2).await;
    platform.aws.faults.set(FaultState {
        rate_limited_secs: Some(3),
        ..FaultState::default()
    });
    platform.aws.faults.calls_reset();
    let mut deployments = Vec::new();
    for service in &services {
        let made = deploy(&s, &owner, service).await;
        deployments.push((service.clone(), made["id"].as_str().unwrap().to_owned()));
    }
    // The first refusal arrives; the limit lifts a moment later.
    eventually("aws is called", async || {
        platform.aws.faults.calls().total > 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    platform.aws.faults.set(FaultState::default());
    eventually("the deployments proceed", async || {
        platform.aws.instance_count() == 2
    })
    .await;
    let starts: Vec<u64> = platform
        .aws
        .faults
        .calls()
        .starts
        .iter()
        .map(|(at, _)| *at)
        .collect();
    let refused_at = starts[0];
    let after: Vec<u64> = starts
        .iter()
        .copied()
        .filter(|at| *at > refused_at + 100)
        .collect();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|at| *at >= refused_at + 2900),
        "called again before the retry-after of 3 s: {starts:?}"
    );
    let events = events(&s, &deployments[0].0, &deployments[0].1).await;
    assert!(
        events
            .iter()
            .any(|(kind, message)| kind == "instance.waiting" && message.contains("rate_limited")),
        "{events:?}"
    );
}
