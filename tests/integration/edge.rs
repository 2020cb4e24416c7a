//! The edge agent in front of a real Caddy (Debian's `caddy` package): a deployed service is
//! reachable by its domain; instances join and leave the route with their health; the route
//! survives the control plane being killed, the agent restarting during the outage (it loads
//! its table from disk) and Caddy restarting (the agent applies the table again); tampered,
//! foreign, older and empty snapshots are refused while the route keeps working; an agent
//! whose first source is down syncs from the second.

use std::path::Path;
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use reqwest::Method;
use serde_json::{Value, json};

use bulkhead::dev::caddy::{self, CaddyProcess};
use bulkhead_edge::sync::Source;
use bulkhead_edge::{EdgeSettings, RunningEdge};
use bulkhead_routing::{RoutingTable, SignedSnapshot};

use crate::routing::{routing_token, table_fetch, table_wait};
use crate::support::{Backend, TestServer, platform};

/// Answers `GET /` with its instance key, `GET /health` with 200 until `GET /sicken`.
const WORKLOAD: &str = "import os,http.server as h\nsick=[False]\nclass H(h.BaseHTTPRequestHandler):\n def do_GET(s):\n  if s.path=='/sicken': sick[0]=True\n  bad=s.path=='/health' and sick[0]\n  s.send_response(500 if bad else 200); s.end_headers(); s.wfile.write(os.environ.get('BULKHEAD_INSTANCE_KEY','-').encode())\n def log_message(s,*a): pass\nh.HTTPServer(('127.0.0.1',int(os.environ['PORT'])),H).serve_forever()";

pub(crate) const DOMAIN: &str = "shop.edge.test";

pub(crate) fn free_port() -> u16 {
    caddy::free_port().unwrap()
}

/// A Caddy with its admin API on a port of its own, started with no routes.
pub(crate) async fn caddy_start(dir: &Path) -> CaddyProcess {
    let caddy = CaddyProcess::start(Path::new("caddy"), &dir.join("caddy"), free_port()).unwrap();
    caddy.ready().await.unwrap();
    caddy
}

/// `GET /` of the domain through Caddy: status and body (or the error).
pub(crate) async fn through_caddy(port: u16) -> Result<(u16, String), String> {
    let response = crate::support::http()
        .get(format!("http://127.0.0.1:{port}/"))
        .header("host", DOMAIN)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|err| err.to_string())?;
    let status = response.status().as_u16();
    Ok((status, response.text().await.unwrap_or_default()))
}

/// Waits until the domain answers 200 through Caddy; returns the answering instance's key.
async fn answers(port: u16, what: &str) -> String {
    let started = Instant::now();
    loop {
        if let Ok((200, body)) = through_caddy(port).await {
            return body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: the domain does not answer through Caddy: {:?}",
            through_caddy(port).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `requests` requests through Caddy and asserts that every one is answered (an outage
/// of a few seconds would fail it, where [`answers`] waits it out); returns the bodies seen.
async fn every_request_answers(
    port: u16,
    requests: usize,
    what: &str,
) -> std::collections::BTreeSet<String> {
    let mut bodies = std::collections::BTreeSet::new();
    for n in 0..requests {
        match through_caddy(port).await {
            Ok((200, body)) => {
                bodies.insert(body);
            }
            other => panic!("{what}: request {n} of {requests} was not answered: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bodies
}

/// The instance keys that answer across `requests` requests.
async fn answering(port: u16, requests: usize) -> std::collections::BTreeSet<String> {
    let mut keys = std::collections::BTreeSet::new();
    for _ in 0..requests {
        if let Ok((200, body)) = through_caddy(port).await {
            keys.insert(body);
        }
    }
    keys
}

pub(crate) fn edge_settings(
    dir: &Path,
    sources: Vec<Source>,
    token: &str,
    caddy: &CaddyProcess,
    http_port: u16,
) -> EdgeSettings {
    EdgeSettings {
        id: "edge-test".into(),
        sources,
        token: Some(token.to_owned()),
        trusted_keys: dir.join("trusted-keys.json"),
        ca_file: None,
        state_dir: dir.join("edge-state"),
        caddy_admin: caddy.admin(),
        caddy_listen: format!("127.0.0.1:{http_port}"),
        tls: None,
        listen: "127.0.0.1:0".parse().unwrap(),
        max_drop: 0.5,
        poll_interval: Duration::from_millis(200),
        stale_after: Duration::from_secs(300),
    }
}

async fn edge_health(edge: &RunningEdge) -> Value {
    crate::support::get(format!("http://{}/healthz", edge.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A project with a service of `replicas` on metal running [`WORKLOAD`], bound to
/// [`DOMAIN`]: its owner's token and its path.
pub(crate) async fn service_on_domain(s: &TestServer, replicas: u32) -> (String, String) {
    let fixture =
        crate::deployments::fixture_running(s, replicas, &["metal"], WORKLOAD, "/health").await;
    let service_id = fixture.service.rsplit('/').next().unwrap();
    crate::support::domain_bind(s, &fixture.owner, &fixture.project, service_id, DOMAIN).await;
    (fixture.owner, fixture.service)
}

pub(crate) async fn deployed(s: &TestServer, owner: &str, service: &str) {
    let made = s
        .call(
            Method::POST,
            &format!("{service}/deployments"),
            Some(owner),
            None,
        )
        .await;
    let id = made.assert_status(201)["id"].as_str().unwrap().to_owned();
    crate::deployments::deployment_wait(s, service, &id, "healthy", Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_keeps_caddy_routing_through_a_control_plane_outage() {
    let s = TestServer::start(Backend::Sqlite).await.unwrap();
    let (_platform, _platform_dir) = platform(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let token = edge_token(&s, dir.path()).await;
    let (owner, service) = service_on_domain(&s, 2).await;
    deployed(&s, &owner, &service).await;
    table_wait(&s, &token, "two upstreams", |t| t.upstream_count() == 2).await;

    let caddy = caddy_start(dir.path()).await;
    let http_port = free_port();
    // The first control plane is down: the agent syncs from the second.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let sources = vec![
        Source::ControlPlane(dead),
        Source::ControlPlane(s.base.clone()),
    ];
    let edge = bulkhead_edge::start(edge_settings(
        dir.path(),
        sources.clone(),
        &token,
        &caddy,
        http_port,
    ))
    .await
    .unwrap();
    answers(http_port, "served from the second source").await;
    let health = edge_health(&edge).await;
    assert_eq!(health["source"], s.base, "{health}");
    assert_eq!(health["watching"], true, "{health}");
    let both = answering(http_port, 12).await;
    assert_eq!(both.len(), 2, "both instances serve: {both:?}");

    // The edge reports what it serves.
    let (table, _) = table_fetch(&s, &token).await;
    let started = Instant::now();
    loop {
        let edges = s.get("/v1/edges", &token).await;
        if edges.body["items"][0]["revision"] == table.revision {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no report: {}",
            edges.text
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A new healthy instance joins the route; a failed one leaves it.
    s.patch(&service, &owner, json!({ "replicas": 3 }))
        .await
        .assert_status(200);
    deployed(&s, &owner, &service).await;
    table_wait(&s, &token, "three upstreams", |t| t.upstream_count() == 3).await;
    let started = Instant::now();
    while answering(http_port, 12).await.len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the third instance never served"
        );
    }
    let (table, _) = table_fetch(&s, &token).await;
    let sick = &table.routes[0].upstreams[0];
    crate::support::get(format!("http://{}/sicken", sick.address))
        .await
        .unwrap();
    table_wait(&s, &token, "the sick one out", |t| t.upstream_count() == 2).await;
    // Sampled only once Caddy has the table without it: a few requests that miss it prove
    // nothing while it is still an upstream (under load the edge may apply it later).
    let (without_sick, _) = table_fetch(&s, &token).await;
    let started = Instant::now();
    while edge_health(&edge).await["caddy_revision"].as_i64() < Some(without_sick.revision) {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "Caddy never got revision {}",
            without_sick.revision
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = Instant::now();
    while answering(http_port, 12).await.contains(&sick.instance_key) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the sick instance still serves"
        );
    }
    let (before_outage, _) = table_fetch(&s, &token).await;

    // The control plane is killed: the domain keeps answering.
    s.stop().await;
    let serving = every_request_answers(http_port, 20, "with the control plane down").await;
    assert_eq!(serving.len(), 2, "both instances serve: {serving:?}");

    // The agent restarts during the outage: it loads its table from disk.
    edge.shutdown().await;
    let edge = bulkhead_edge::start(edge_settings(
        dir.path(),
        sources,
        &token,
        &caddy,
        http_port,
    ))
    .await
    .unwrap();
    let health = edge_health(&edge).await;
    assert_eq!(health["revision"], before_outage.revision, "{health}");
    every_request_answers(http_port, 20, "after the agent restarted").await;

    // Caddy restarts during the outage: the agent applies the table again.
    let caddy = caddy.restart().await.unwrap();
    answers(http_port, "after Caddy restarted").await;
    let health = edge_health(&edge).await;
    assert_eq!(health["caddy_revision"], before_outage.revision, "{health}");
    let metrics = crate::support::get(format!("http://{}/metrics", edge.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("bulkhead_edge_revision"), "{metrics}");
    edge.shutdown().await;
    drop(caddy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_foreign_older_and_empty_snapshots_are_refused() {
    let s = TestServer::start(Backend::Sqlite).await.unwrap();
    let (_platform, _platform_dir) = platform(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let token = routing_token(&s).await;
    let (owner, service) = service_on_domain(&s, 1).await;
    let (older, older_document) = table_fetch(&s, &token).await;
    deployed(&s, &owner, &service).await;
    let current = table_wait(&s, &token, "an upstream", |t| t.upstream_count() == 1).await;
    let (_, document) = table_fetch(&s, &token).await;
    assert!(older.revision < current.revision);

    // The edge trusts the control plane's key and the operator's own (to sign test tables).
    let operator = SigningKey::from_bytes(&[42; 32]);
    let mut keys = s.get("/v1/routing-table/keys", &token).await.body.clone();
    keys["keys"].as_array_mut().unwrap().push(json!({
        "id": bulkhead_routing::key_id_of(&operator.verifying_key()),
        "public_key": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, operator.verifying_key().as_bytes()),
        "state": "active",
        "created_at": "2026-11-30T00:00:00Z",
    }));
    std::fs::write(dir.path().join("trusted-keys.json"), keys.to_string()).unwrap();

    let file = dir.path().join("published.json");
    std::fs::write(&file, &document).unwrap();
    let caddy = caddy_start(dir.path()).await;
    let http_port = free_port();
    let edge = bulkhead_edge::start(edge_settings(
        dir.path(),
        vec![Source::File(file.clone())],
        &token,
        &caddy,
        http_port,
    ))
    .await
    .unwrap();
    let serving = answers(http_port, "from the file").await;

    let stranger = SigningKey::from_bytes(&[13; 32]);
    let newer = |routes: Vec<bulkhead_routing::Route>| RoutingTable {
        revision: current.revision + 10,
        generated_at: chrono::Utc::now(),
        drop_intended: false,
        routes,
    };
    let tampered = String::from_utf8(document.clone())
        .unwrap()
        .replace(&current.routes[0].upstreams[0].address, "127.0.0.1:9");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bad_signature", tampered.into_bytes()),
        (
            "unknown_key",
            SignedSnapshot::sign(&newer(vec![]), &stranger),
        ),
        ("not newer", older_document),
        (
            "no route at all",
            SignedSnapshot::sign(&newer(vec![]), &operator),
        ),
        (
            "would drop",
            SignedSnapshot::sign(
                &newer(vec![bulkhead_routing::Route {
                    upstreams: vec![],
                    ..current.routes[0].clone()
                }]),
                &operator,
            ),
        ),
    ];
    for (reason, bytes) in cases {
        std::fs::write(&file, &bytes).unwrap();
        let started = Instant::now();
        loop {
            let health = edge_health(&edge).await;
            if health["last_refusal"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(reason))
            {
                assert_eq!(health["revision"], current.revision, "{health}");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{reason} not refused: {health}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let seen = every_request_answers(http_port, 10, reason).await;
        assert_eq!(seen, [serving.clone()].into(), "the route keeps working");
    }
    // The snapshot on disk is still the accepted one.
    let on_disk = std::fs::read(dir.path().join("edge-state/snapshot.json")).unwrap();
    assert_eq!(on_disk, document);
    edge.shutdown().await;
}

/// A token with `routing:read` for an edge of `s`, and the keys it trusts written to
/// `dir/trusted-keys.json`.
pub(crate) async fn edge_token(s: &TestServer, dir: &Path) -> String {
    let token = routing_token(s).await;
    let keys = s.get("/v1/routing-table/keys", &token).await;
    std::fs::write(
        dir.join("trusted-keys.json"),
        keys.assert_status(200).to_string(),
    )
    .unwrap();
    token
}

/// An edge agent that syncs from `s` alone (verifying it with `ca_file`), with no Caddy to
/// drive: for tests of how it reaches the control plane.
pub async fn edge_over(
    s: &TestServer,
    dir: &Path,
    ca_file: Option<std::path::PathBuf>,
) -> RunningEdge {
    let token = edge_token(s, dir).await;
    let settings = EdgeSettings {
        id: "edge-tls".into(),
        sources: vec![Source::ControlPlane(s.base.clone())],
        token: Some(token),
        trusted_keys: dir.join("trusted-keys.json"),
        ca_file,
        state_dir: dir.join("edge-state"),
        // Nothing listens there: the edge keeps trying, which does not stop its sync.
        caddy_admin: format!("http://127.0.0.1:{}", free_port()),
        caddy_listen: format!("127.0.0.1:{}", free_port()),
        tls: None,
        listen: "127.0.0.1:0".parse().unwrap(),
        max_drop: 0.5,
        poll_interval: Duration::from_millis(200),
        stale_after: Duration::from_secs(300),
    };
    bulkhead_edge::start(settings).await.unwrap()
}
