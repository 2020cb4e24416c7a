//! Outbound webhooks: a project's endpoint receives its deployments' events signed as the
//! Standard Webhooks specification says (checked here with an HMAC computed independently),
//! failed deliveries are retried on the schedule, replayed on demand with the same
//! `webhook-id`, signed twice during a secret's rotation, filtered by event type; an endpoint
//! that keeps failing opens its breaker; private and metadata addresses, other tenants and
//! narrower roles are refused.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::backend_tests;
use crate::support::{Backend, ProjectWithService, TestServer, eventually};

backend_tests!(
    deployment_events_are_signed_retried_and_replayed,
    a_failing_endpoint_opens_its_breaker
);

/// A request the receiver got.
#[derive(Clone, Debug)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

/// A webhook receiver on loopback that answers with `status` and records what it got.
struct Receiver {
    url: String,
    status: Arc<AtomicU16>,
    received: Arc<Mutex<Vec<Received>>>,
    _server: bulkhead_simulators::RunningSimulator,
}

impl Receiver {
    async fn start() -> Self {
        let status = Arc::new(AtomicU16::new(200));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (answer, log) = (status.clone(), received.clone());
        let router = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let (answer, log) = (answer.clone(), log.clone());
                async move {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    log.lock().unwrap().push(Received {
                        id: header("webhook-id"),
                        timestamp: header("webhook-timestamp"),
                        signature: header("webhook-signature"),
                        body,
                    });
                    StatusCode::from_u16(answer.load(Ordering::Relaxed)).unwrap()
                }
            }),
        );
        let server =
            bulkhead_simulators::RunningSimulator::serve("127.0.0.1:0".parse().unwrap(), router)
                .await
                .unwrap();
        Self {
            url: format!("{}/hook", server.url()),
            status,
            received,
            _server: server,
        }
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Whether `signature` (space-separated `v1,…`) holds a valid signature under `secret`.
fn signed_with(secret: &str, received: &Received) -> bool {
    let engine = base64::engine::general_purpose::STANDARD;
    let key = engine
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.{}", received.id, received.timestamp, received.body).as_bytes());
    let expected = format!("v1,{}", engine.encode(mac.finalize().into_bytes()));
    received.signature.split(' ').any(|s| s == expected)
}

async fn deploy(s: &TestServer, project: &ProjectWithService) -> String {
    let made = s
        .call(
            Method::POST,
            &format!(
                "/v1/projects/{}/services/{}/deployments",
                project.id, project.service
            ),
            Some(&project.owner),
            None,
        )
        .await;
    made.assert_status(201)["id"].as_str().unwrap().to_owned()
}

async fn deployment_events_are_signed_retried_and_replayed(backend: Backend) {
    let Some(s) = TestServer::start(backend).await else {
        return;
    };
    let receiver = Receiver::start().await;
    let shop = s.project_with_service("hooks").await;
    let endpoints = format!("/v1/projects/{}/webhooks", shop.id);

    // Refused: addresses inside the platform's network, plain http elsewhere, credentials in
    // the URL; a member (not an admin); another tenant.
    for url in [
        "https://169.254.169.254/latest/meta-data",
        "https://10.0.0.5/hook",
        "https://[fd00::1]/hook",
        "http://hooks.example.com/hook",
        "https://user:pw@hooks.example.com/hook",
        "not a url",
    ] {
        s.post(&endpoints, &shop.owner, json!({ "url": url }))
            .await
            .assert_problem(422, "invalid_request");
    }
    let member = format!("member-{}@example.com", uuid::Uuid::new_v4().simple());
    s.user_create(&member).await;
    s.member_add(&shop.id, &member, "member").await;
    let member = s.login(&member).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.post(&endpoints, &member, json!({ "url": receiver.url }))
        .await
        .assert_problem(403, "forbidden");
    let other = s.project_with_service("hooks").await;
    s.post(&endpoints, &other.owner, json!({ "url": receiver.url }))
        .await
        .assert_problem(404, "not_found");

    let created = s
        .post(&endpoints, &shop.owner, json!({ "url": receiver.url }))
        .await;
    let created = created.assert_status(201).clone();
    let endpoint = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"));
    let read = s.get(&format!("{endpoints}/{endpoint}"), &member).await;
    assert!(!read.assert_status(200).to_string().contains(&secret));
    // A member sees the URL's origin only (a chat service's URL carries a secret in its
    // path), in the endpoint, its list and the audit log; an admin sees it whole.
    let origin = receiver.url.trim_end_matches("/hook");
    assert_eq!(read.assert_status(200)["url"], format!("{origin}/…"));
    let listed = s.get(&endpoints, &member).await;
    assert_eq!(
        listed.assert_status(200)["items"][0]["url"],
        format!("{origin}/…")
    );
    let whole = s.get(&format!("{endpoints}/{endpoint}"), &shop.owner).await;
    assert_eq!(whole.assert_status(200)["url"], receiver.url.as_str());
    let audit = s
        .get(
            &format!("/v1/audit-events?project_id={}", shop.id),
            &shop.owner,
        )
        .await;
    let audit = audit.assert_status(200).to_string();
    assert!(!audit.contains("/hook"), "{audit}");
    // An endpoint for healthy deployments only gets none of what follows.
    let healthy_only = s
        .post(
            &endpoints,
            &shop.owner,
            json!({ "url": format!("{}?only=healthy", receiver.url), "event_types": ["deployment.healthy"] }),
        )
        .await;
    healthy_only.assert_status(201);

    // A deployment's `deployment.queued`, delivered and signed.
    let first = deploy(&s, &shop).await;
    eventually("the event is delivered", async || {
        !receiver.received().is_empty()
    })
    .await;
    let got = receiver.received()[0].clone();
    assert!(got.id.starts_with("msg_"), "{got:?}");
    let sent_at: i64 = got.timestamp.parse().unwrap();
    assert!((chrono::Utc::now().timestamp() - sent_at).abs() < 30);
    assert!(
        signed_with(&secret, &got),
        "the signature verifies: {got:?}"
    );
    assert!(!signed_with("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &got));
    let body: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(body["type"], "deployment.queued");
    assert_eq!(body["data"]["deployment_id"], first);
    let log = s
        .get(&format!("{endpoints}/{endpoint}/messages"), &member)
        .await;
    let log = log.assert_status(200)["items"].as_array().unwrap().clone();
    assert_eq!(log[0]["state"], "delivered");
    assert_eq!(log[0]["last_status"], 200);
    assert_eq!(log[0]["webhook_id"], got.id.as_str());

    // A failing endpoint: the attempt fails, the next (5 s later, ±20 %) delivers, with the
    // same webhook-id and a fresh signature.
    receiver.status.store(503, Ordering::Relaxed);
    let before = receiver.received().len();
    deploy(&s, &shop).await;
    eventually("the endpoint is tried", async || {
        receiver.received().len() > before
    })
    .await;
    receiver.status.store(200, Ordering::Relaxed);
    let failed_id = receiver.received()[before].id.clone();
    eventually("the retry delivers it", async || {
        receiver
            .received()
            .iter()
            .filter(|r| r.id == failed_id)
            .count()
            == 2
    })
    .await;
    let retried = s
        .get(
            &format!("{endpoints}/{endpoint}/messages?order=desc"),
            &member,
        )
        .await;
    let retried = retried.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["webhook_id"] == failed_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(retried["state"], "delivered");
    assert_eq!(retried["attempts"], 2);

    // A replay sends it again, same id.
    let message = log[0]["id"].as_str().unwrap();
    s.call(
        Method::POST,
        &format!("{endpoints}/{endpoint}/messages/{message}/replay"),
        Some(&member),
        None,
    )
    .await
    .assert_problem(403, "forbidden");
    let count = |id: &str| receiver.received().iter().filter(|r| r.id == id).count();
    s.call(
        Method::POST,
        &format!("{endpoints}/{endpoint}/messages/{message}/replay"),
        Some(&shop.owner),
        None,
    )
    .await
    .assert_status(200);
    eventually("the replay arrives", async || count(&got.id) == 2).await;

    // A rotation: messages carry signatures with the new secret and the previous one.
    let rotated = s
        .call(
            Method::POST,
            &format!("{endpoints}/{endpoint}/secret"),
            Some(&shop.owner),
            None,
        )
        .await;
    let new_secret = rotated.assert_status(200)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = receiver.received().len();
    deploy(&s, &shop).await;
    eventually("a message after the rotation", async || {
        receiver.received().len() > before
    })
    .await;
    let after = receiver.received()[before].clone();
    assert!(
        signed_with(&new_secret, &after) && signed_with(&secret, &after),
        "{after:?}"
    );
    // The healthy-only endpoint got nothing (no deployment became healthy here).
    let healthy_log = s
        .get(
            &format!(
                "{endpoints}/{}/messages",
                healthy_only.body["id"].as_str().unwrap()
            ),
            &shop.owner,
        )
        .await;
    assert_eq!(healthy_log.assert_status(200)["items"], json!([]));
}

async fn a_failing_endpoint_opens_its_breaker(backend: Backend) {
    let Some(s) = TestServer::start(backend).await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.status.store(500, Ordering::Relaxed);
    let shop = s.project_with_service("hooks").await;
    let endpoints = format!("/v1/projects/{}/webhooks", shop.id);
    let created = s
        .post(
            &endpoints,
            &shop.owner,
            json!({ "url": receiver.url, "event_types": ["deployment.queued"] }),
        )
        .await;
    let endpoint = created.assert_status(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..8 {
        deploy(&s, &shop).await;
    }
    eventually("five attempts fail", async || {
        receiver.received().len() >= 5
    })
    .await;
    // Open: no sixth attempt for a minute, though eight messages wait.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.received().len(), 5);
    let view = s.get(&format!("{endpoints}/{endpoint}"), &shop.owner).await;
    let view = view.assert_status(200).clone();
    assert!(view["open_until"].is_string(), "{view}");
    assert_eq!(view["failures"], 5);
    let log = s
        .get(
            &format!("{endpoints}/{endpoint}/messages?limit=50"),
            &shop.owner,
        )
        .await;
    let log = log.assert_status(200)["items"].as_array().unwrap().clone();
    assert_eq!(log.len(), 8);
    assert!(log.iter().all(|m| m["state"] == "pending"), "{log:#?}");
    // A new URL closes the breaker.
    let updated = s
        .patch(
            &format!("{endpoints}/{endpoint}"),
            &shop.owner,
            json!({ "url": format!("{}?v=2", receiver.url) }),
        )
        .await;
    assert_eq!(updated.assert_status(200)["failures"], 0);
}
