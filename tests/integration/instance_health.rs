//! Health checks of cloud instances: the simulators' instances answer what a test tells them
//! (`instance_answer_with`), so a failing health check is exercised on gcp and aws as on
//! metal. A running instance that fails its checks leaves the routes, and comes back when it
//! answers again; one that stays unhealthy is replaced, make before break. On metal the host
//! agent makes the checks near the workload and reports them; the control plane checks only
//! while no report comes.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::Value;

use crate::deployments::{deploy, deployment_wait, event_items, fixture, fixture_running};
use crate::routing::{routing_token, table_wait};
use crate::support::{
    ADMIN_TOKEN, Backend, TestServer, database_fresh, domain_bind, eventually, platform,
};
use crate::{backend_tests, db_tests};

db_tests!(a_sick_cloud_instance_leaves_the_routes_and_returns_when_well);
db_tests!(the_host_agent_checks_its_workloads_and_the_control_plane_only_without_its_reports);
backend_tests!(an_instance_that_stays_unhealthy_is_replaced_make_before_break);

const DOMAIN: &str = "health.example.com";

/// The health of the service's instance on `provider`, as the API shows it.
async fn health_on(s: &TestServer, service: &str, provider: &str) -> Value {
    let instances = s.get(&format!("{service}/instances"), ADMIN_TOKEN).await;
    instances.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|instance| instance["provider"] == provider)
        .unwrap_or_else(|| panic!("no instance on {provider}: {}", instances.body))["health"]
        .clone()
}

async fn a_sick_cloud_instance_leaves_the_routes_and_returns_when_well(s: TestServer) {
    let (platform, _dir) = platform(&s).await;
    let f = fixture(&s, 2, &["gcp", "aws"]).await;
    let service_id = f.service.rsplit('/').next().unwrap();
    domain_bind(&s, &f.owner, &f.project, service_id, DOMAIN).await;
    let made = deploy(&s, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    let healthy = deployment_wait(&s, &f.service, id, "healthy", Duration::from_secs(60)).await;
    let key_on = |provider: &str| {
        healthy["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|instance| instance["provider"] == provider)
            .unwrap_or_else(|| panic!("no instance on {provider}: {healthy:#}"))["instance_key"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let token = routing_token(&s).await;
    table_wait(&s, &token, "both upstreams", |t| t.upstream_count() == 2).await;

    for provider in ["gcp", "aws"] {
        let key = key_on(provider);
        let set = |status: StatusCode| match provider {
            "gcp" => platform.gcp.instance_answer_with(&key, status),
            _ => platform.aws.instance_answer_with(&key, status),
        };
        assert!(set(StatusCode::SERVICE_UNAVAILABLE), "{provider}: {key}");
        eventually(&format!("the {provider} instance unhealthy"), async || {
            health_on(&s, &f.service, provider).await == "unhealthy"
        })
        .await;
        let table = table_wait(&s, &token, "the sick one out", |t| t.upstream_count() == 1).await;
        assert!(
            table.routes[0]
                .upstreams
                .iter()
                .all(|upstream| upstream.instance_key != key),
            "{provider}: {table:?}"
        );

        assert!(set(StatusCode::OK));
        eventually(
            &format!("the {provider} instance healthy again"),
            async || health_on(&s, &f.service, provider).await == "healthy",
        )
        .await;
        table_wait(&s, &token, "both upstreams again", |t| {
            t.upstream_count() == 2
        })
        .await;
    }
}

/// A workload whose `/ready` passes only for its host agent's checks (user agent
/// `bulkhead-agent`) and while it is well (`/sick`, `/well`); `/checks` counts the checks of
/// `/ready` that came from anyone else.
const AGENT_CHECKED: &str = "import os,http.server as h\nsick=[False];others=[0]\nclass H(h.BaseHTTPRequestHandler):\n def do_GET(s):\n  agent=s.headers.get('User-Agent','').startswith('bulkhead-agent')\n  if s.path=='/sick': sick[0]=True\n  if s.path=='/well': sick[0]=False\n  if s.path=='/ready' and not agent: others[0]+=1\n  ok=s.path!='/ready' or (agent and not sick[0])\n  s.send_response(200 if ok else 503); s.end_headers(); s.wfile.write(str(others[0]).encode())\n def log_message(s,*a): pass\nh.HTTPServer(('127.0.0.1',int(os.environ['PORT'])),H).serve_forever()";

async fn the_host_agent_checks_its_workloads_and_the_control_plane_only_without_its_reports(
    s: TestServer,
) {
    let (platform, _dir) = platform(&s).await;
    let f = fixture_running(&s, 1, &["metal"], AGENT_CHECKED, "/ready").await;
    let service_id = f.service.rsplit('/').next().unwrap();
    domain_bind(&s, &f.owner, &f.project, service_id, DOMAIN).await;
    let made = deploy(&s, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    // Healthy only through the agent's checks: the control plane's own get 503.
    let healthy = deployment_wait(&s, &f.service, id, "healthy", Duration::from_secs(60)).await;
    let address = healthy["instances"][0]["address"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = routing_token(&s).await;
    table_wait(&s, &token, "the instance routed", |t| {
        t.upstream_count() == 1
    })
    .await;
    let visit = async |path: &str| -> u64 {
        crate::support::get(format!("http://{address}{path}"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
            .parse()
            .unwrap()
    };

    // While the agent reports, the control plane does not check (every 200 ms otherwise).
    let before = visit("/").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        visit("/").await,
        before,
        "the control plane checked a reported instance"
    );

    // Sick: the agent's checks fail 3 times, it reports, the instance leaves the routes.
    visit("/sick").await;
    eventually("the instance unhealthy", async || {
        health_on(&s, &f.service, "metal").await == "unhealthy"
    })
    .await;
    table_wait(&s, &token, "the sick one out", |t| t.upstream_count() == 0).await;
    visit("/well").await;
    eventually("the instance healthy again", async || {
        health_on(&s, &f.service, "metal").await == "healthy"
    })
    .await;
    table_wait(&s, &token, "routed again", |t| t.upstream_count() == 1).await;

    // The agent's machine goes down: no more reports, and the control plane's own checks
    // (which find nothing there) take the instance out of the routes within seconds.
    let bulkhead::dev::DevPlatform { agent, .. } = platform;
    agent.shutdown_and_stop_workloads().await;
    eventually("the instance unhealthy without its agent", async || {
        health_on(&s, &f.service, "metal").await == "unhealthy"
    })
    .await;
    table_wait(&s, &token, "out without its agent", |t| {
        t.upstream_count() == 0
    })
    .await;
}

async fn an_instance_that_stays_unhealthy_is_replaced_make_before_break(backend: Backend) {
    let Some((database_url, dir)) = database_fresh(backend).await else {
        return;
    };
    let s = TestServer::start_on(backend, database_url, dir, |settings| {
        settings.deploy.unhealthy_replace_after = Duration::from_secs(1);
    })
    .await;
    let (platform, _dir) = platform(&s).await;
    let f = fixture(&s, 2, &["gcp", "aws"]).await;
    let made = deploy(&s, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    let healthy = deployment_wait(&s, &f.service, id, "healthy", Duration::from_secs(60)).await;
    let sick = healthy["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|instance| instance["provider"] == "gcp")
        .unwrap()["instance_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        platform
            .gcp
            .instance_answer_with(&sick, StatusCode::INTERNAL_SERVER_ERROR)
    );

    // A replacement joins (on gcp again: the spread is kept), then the sick one drains and goes.
    let instances = || async {
        s.get(&format!("{}/instances", f.service), ADMIN_TOKEN)
            .await
            .assert_status(200)["items"]
            .as_array()
            .unwrap()
            .clone()
    };
    eventually("the sick instance replaced and removed", async || {
        let now = instances().await;
        let serving: Vec<&Value> = now
            .iter()
            .filter(|i| i["state"] == "running" && i["health"] == "healthy")
            .collect();
        serving.len() == 2 && now.iter().all(|i| i["instance_key"] != sick.as_str())
    })
    .await;
    let now = instances().await;
    let replacement = now
        .iter()
        .find(|i| i["provider"] == "gcp")
        .unwrap_or_else(|| panic!("the replacement is on gcp: {now:#?}"));
    assert_eq!(replacement["replaces"], sick.as_str(), "{replacement}");

    // Make before break: the replacement was healthy before the sick one started draining.
    let events = event_items(&s, &f.service, id).await;
    let position = |kind: &str, key: &str| {
        events
            .iter()
            .position(|e| e["kind"] == kind && e["details"]["instance_key"] == key)
            .unwrap_or_else(|| panic!("no {kind} of {key}: {events:#?}"))
    };
    let new_key = replacement["instance_key"].as_str().unwrap();
    assert!(position("instance.unhealthy", &sick) < position("instance.replacement", new_key));
    assert!(position("instance.healthy", new_key) < position("instance.draining", &sick));
    // The deployment stayed healthy throughout.
    let after = s
        .get(&format!("{}/deployments/{id}", f.service), ADMIN_TOKEN)
        .await;
    assert_eq!(after.assert_status(200)["state"], "healthy");
}
