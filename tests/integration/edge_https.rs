//! HTTPS at the edge, against a real ACME CA (Pebble, Debian's `pebble` package) and a real
//! Caddy: a verified domain gets a certificate at its first request and its workload answers
//! over HTTPS; plain HTTP redirects; a name the table does not route (unknown, or pending
//! verification) gets no certificate and Pebble no order for it; a removed domain is refused at
//! once; a failed issuance is reported with its error (through the API and the CLI); a second
//! edge sharing the storage serves the first one's certificate without an order; with the
//! control plane and the CA both gone, HTTPS keeps answering, and an edge (agent and Caddy)
//! restarted meanwhile serves it from the certificates on disk.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use bulkhead::dev::acme::AcmeCa;
use bulkhead_edge::certificates::EdgeTls;
use bulkhead_edge::sync::Source;
use bulkhead_edge::{EdgeSettings, RunningEdge};

use crate::edge::{DOMAIN, caddy_start, deployed, edge_token, free_port, service_on_domain};
use crate::routing::table_wait;
use crate::support::{Backend, TestServer, platform};

/// A second domain of the service, removed during the test.
const SECOND: &str = "second.edge.test";
/// A domain whose ACME challenges go elsewhere (Pebble's DNS points it away from the edge).
const ELSEWHERE: &str = "elsewhere.edge.test";

/// An HTTPS client that resolves `domain` to the edge and trusts Pebble's issuing root alone.
fn https_client(root: &Path, domain: &str, https_port: u16) -> reqwest::Client {
    bulkhead_common::tls::http_client_builder(Some(root))
        .unwrap()
        .resolve(domain, SocketAddr::from(([127, 0, 0, 1], https_port)))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// `GET https://{domain}/` on a new connection: status and body, or the error.
async fn over_https(root: &Path, domain: &str, https_port: u16) -> Result<(u16, String), String> {
    let response = https_client(root, domain, https_port)
        .get(format!("https://{domain}:{https_port}/"))
        .send()
        .await
        .map_err(|err| format!("{err:?}"))?;
    let status = response.status().as_u16();
    Ok((status, response.text().await.unwrap_or_default()))
}

/// Waits until `domain` answers 200 over HTTPS; returns how long it took.
async fn https_answers(root: &Path, domain: &str, https_port: u16, what: &str) -> Duration {
    let started = Instant::now();
    loop {
        match over_https(root, domain, https_port).await {
            Ok((200, _)) => return started.elapsed(),
            other => assert!(
                started.elapsed() < Duration::from_secs(60),
                "{what}: {domain} does not answer over HTTPS: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asserts that each of 10 requests to `domain`, each on a new HTTPS connection, is answered.
async fn every_https_request_answers(root: &Path, domain: &str, https_port: u16, what: &str) {
    for n in 0..10 {
        let answer = over_https(root, domain, https_port).await;
        assert!(
            matches!(answer, Ok((200, _))),
            "{what}: request {n} over HTTPS was not answered: {answer:?}"
        );
    }
}

fn tls_settings(
    dir: &Path,
    s: &TestServer,
    token: &str,
    caddy_admin: String,
    ports: (u16, u16),
    ca: &AcmeCa,
) -> EdgeSettings {
    EdgeSettings {
        id: "edge-https".into(),
        sources: vec![Source::ControlPlane(s.base.clone())],
        token: Some(token.to_owned()),
        trusted_keys: dir.join("trusted-keys.json"),
        ca_file: None,
        state_dir: dir.join("edge-state"),
        caddy_admin,
        caddy_listen: format!("127.0.0.1:{}", ports.0),
        tls: Some(
            EdgeTls::resolve(
                format!("127.0.0.1:{}", ports.1),
                &ca.directory(),
                Some("ops@edge.test".into()),
                vec![ca.server_root()],
                dir.join("edge-state").join("certificates"),
            )
            .unwrap(),
        ),
        listen: "127.0.0.1:0".parse().unwrap(),
        max_drop: 0.5,
        poll_interval: Duration::from_millis(200),
        stale_after: Duration::from_secs(300),
    }
}

async fn ask(edge: &RunningEdge, domain: &str) -> u16 {
    crate::support::get(format!("http://{}/tls/ask?domain={domain}", edge.addr))
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The certificates the control plane lists for the edge, once `done` holds of them.
async fn reported(s: &TestServer, token: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let edges = s.get("/v1/edges", token).await;
        let certificates = &edges.body["items"][0]["certificates"];
        if done(certificates) {
            return certificates.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: not reported: {}",
            edges.text
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn item<'a>(certificates: &'a Value, hostname: &str) -> Option<&'a Value> {
    certificates["items"]
        .as_array()?
        .iter()
        .find(|item| item["hostname"] == hostname)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_domains_answer_over_https_through_an_outage() {
    let s = TestServer::start(Backend::Sqlite).await.unwrap();
    let (_platform, _platform_dir) = platform(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let token = edge_token(&s, dir.path()).await;
    let (owner, service) = service_on_domain(&s, 1).await;
    deployed(&s, &owner, &service).await;
    let project = service.split('/').nth(3).unwrap().to_owned();
    let service_id = service.rsplit('/').next().unwrap().to_owned();
    let second = crate::support::domain_bind(&s, &owner, &project, &service_id, SECOND).await;
    crate::support::domain_bind(&s, &owner, &project, &service_id, ELSEWHERE).await;
    // Pending: never verified, so never in the table.
    s.post(
        &format!("/v1/projects/{project}/domains"),
        &owner,
        json!({ "hostname": "pending.edge.test", "service_id": service_id }),
    )
    .await
    .assert_status(201);
    table_wait(&s, &token, "three routed domains", |t| {
        t.routes.len() == 3 && t.upstream_count() == 3
    })
    .await;

    let ports = (free_port(), free_port());
    let ca = AcmeCa::start(&dir.path().join("pebble"), ports.0, ports.1)
        .await
        .unwrap();
    ca.dns_point(ELSEWHERE, "127.0.0.9").await.unwrap();
    let root = ca.issuing_root().await.unwrap();
    let caddy = caddy_start(dir.path()).await;
    let settings = tls_settings(dir.path(), &s, &token, caddy.admin(), ports, &ca);
    let edge = bulkhead_edge::start(settings.clone()).await.unwrap();

    // A verified domain: a certificate from Pebble at its first request, the workload behind.
    let first = https_answers(&root, DOMAIN, ports.1, "a verified domain").await;
    eprintln!("first HTTPS answer (issuance included) in {first:?}");
    https_answers(&root, SECOND, ports.1, "a second verified domain").await;
    assert_eq!(ask(&edge, DOMAIN).await, 200);

    // Plain HTTP redirects the table's domains to HTTPS; an unknown host is 404.
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{}/cart?x=1", ports.0))
        .header("host", DOMAIN)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 308);
    assert_eq!(
        plain.headers()["location"],
        format!("https://{DOMAIN}:{}/cart?x=1", ports.1).as_str()
    );

    // Names the table does not route: no certificate, no order at Pebble.
    let orders = ca.orders();
    for name in ["unknown.edge.test", "pending.edge.test"] {
        assert_eq!(ask(&edge, name).await, 403, "{name}");
        let answer = over_https(&root, name, ports.1).await;
        assert!(answer.is_err(), "{name} was answered: {answer:?}");
    }
    assert_eq!(
        ca.orders(),
        orders,
        "Pebble took an order for a name outside the table"
    );
    let log = ca.log();
    assert!(
        !log.contains("unknown.edge.test") && !log.contains("pending.edge.test"),
        "{log}"
    );

    // A domain whose challenges fail: the edge reports the CA's error.
    let answer = over_https(&root, ELSEWHERE, ports.1).await;
    assert!(answer.is_err(), "{ELSEWHERE} was answered: {answer:?}");
    let certificates = reported(&s, &token, "the certificates and the failure", |c| {
        item(c, DOMAIN).is_some_and(|i| i["not_after"].is_string())
            && item(c, ELSEWHERE).is_some_and(|i| i["last_error"].is_string())
    })
    .await;
    let served = item(&certificates, DOMAIN).unwrap();
    assert!(
        served["issuer"].as_str().unwrap().contains("Pebble"),
        "{certificates}"
    );
    let not_after: chrono::DateTime<chrono::Utc> =
        served["not_after"].as_str().unwrap().parse().unwrap();
    assert!(
        not_after > chrono::Utc::now() + chrono::Duration::days(14),
        "{certificates}"
    );
    assert_eq!(certificates["domains"], 3, "{certificates}");
    assert_eq!(certificates["issued"], 2, "{certificates}");
    assert_eq!(certificates["failing"], 1, "{certificates}");
    assert_eq!(
        item(&certificates, ELSEWHERE).unwrap()["hostname"],
        certificates["items"][0]["hostname"],
        "failing ones are listed first: {certificates}"
    );
    // The CLI shows them.
    let cli = crate::cli_client::Cli::with_token(&s.base, &token);
    let listed = cli.run("routes certificates").await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed.stdout.contains(DOMAIN) && listed.stdout.contains("Pebble"),
        "{}",
        listed.stdout
    );
    let edges = cli.run("routes edges").await;
    assert!(edges.stdout.contains("2 of 3 issued"), "{}", edges.stdout);
    let metrics = crate::support::get(format!("http://{}/metrics", edge.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("bulkhead_edge_certificates_expiring_soon 0"),
        "{metrics}"
    );

    // A removed domain is refused at once, its certificate still on disk.
    s.delete(
        &format!(
            "/v1/projects/{project}/domains/{}",
            second["id"].as_str().unwrap()
        ),
        &owner,
    )
    .await
    .assert_status(204);
    table_wait(&s, &token, "the second domain removed", |t| {
        t.routes.len() == 2
    })
    .await;
    let started = Instant::now();
    while over_https(&root, SECOND, ports.1).await.is_ok() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the removed domain is still served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ask(&edge, SECOND).await, 403);

    // A second edge sharing the first one's certificate storage serves the domain with the
    // certificate the first obtained: no order of its own (Pebble validates the first edge's
    // ports alone, so an order from this one could not succeed).
    let orders = ca.orders();
    let caddy_b = caddy_start(&dir.path().join("b")).await;
    let ports_b = (free_port(), free_port());
    let edge_b = bulkhead_edge::start(EdgeSettings {
        id: "edge-https-b".into(),
        state_dir: dir.path().join("b").join("edge-state"),
        caddy_admin: caddy_b.admin(),
        caddy_listen: format!("127.0.0.1:{}", ports_b.0),
        tls: Some(EdgeTls {
            listen: format!("127.0.0.1:{}", ports_b.1),
            ..settings.tls.clone().unwrap()
        }),
        ..settings.clone()
    })
    .await
    .unwrap();
    https_answers(&root, DOMAIN, ports_b.1, "an edge sharing the storage").await;
    assert_eq!(ca.orders(), orders, "the second edge ordered a certificate");
    edge_b.shutdown().await;
    drop(caddy_b);

    // The control plane and the CA are gone: HTTPS keeps answering.
    let orders = ca.orders();
    drop(ca);
    s.stop().await;
    every_https_request_answers(&root, DOMAIN, ports.1, "with the control plane down").await;

    // The whole edge restarts during the outage: the agent loads its table from disk, Caddy
    // its certificate from storage.
    edge.shutdown().await;
    let caddy = caddy.restart().await.unwrap();
    let edge = bulkhead_edge::start(settings).await.unwrap();
    let again = https_answers(&root, DOMAIN, ports.1, "after the edge restarted").await;
    eprintln!("HTTPS from disk after a restart in {again:?} ({orders} orders before)");
    every_https_request_answers(&root, DOMAIN, ports.1, "after the edge restarted").await;
    assert!(over_https(&root, SECOND, ports.1).await.is_err());
    edge.shutdown().await;
    drop(caddy);
}
