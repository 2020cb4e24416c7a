//! The plugin registry through the API: bundled plugins registered at start-up, uploads
//! validated and stored by digest, activation gated by a health check, atomic hot swap under
//! concurrent calls, rollback, write-only secrets and settings validation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use reqwest::Method;
use serde_json::{Value, json};

use crate::db_tests;
use crate::support::{
    ADMIN_TOKEN, Reply, TestServer, plugin_bytes, provider_probe, provider_state, state_wait,
};

db_tests!(
    bundled_example_is_registered_once_and_serves,
    uploads_are_validated_and_stored_by_digest,
    activation_checks_health_and_rollback_restores,
    hot_swap_under_concurrent_calls_loses_no_call,
    secrets_are_write_only_and_settings_validated,
    provider_details_are_for_administrators,
);

/// The test servers' bundled providers, in name order.
fn bundled_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = crate::support::bundled_plugins()
        .each()
        .map(|bundled| bundled.provider)
        .collect();
    names.sort();
    names
}

pub(crate) async fn upload(s: &TestServer, token: &str, bytes: Vec<u8>) -> Reply {
    TestServer::send(
        s.request(Method::POST, "/v1/plugins", Some(token))
            .header("content-type", "application/wasm")
            .body(bytes),
    )
    .await
}

/// The example plugin with a custom section appended: the same behaviour, another digest
/// (a second "version" to switch between).
pub(crate) fn example_variant(tag: &str) -> Vec<u8> {
    let mut bytes = plugin_bytes("bulkhead_plugin_example.wasm");
    let name = b"bulkhead-test-variant";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    assert!(payload.len() < 128, "one-byte LEB128 size");
    bytes.push(0);
    bytes.push(payload.len() as u8);
    bytes.extend_from_slice(&payload);
    bytes
}

/// What the server answers to an upload that declares 33 MiB, before any of it is sent.
async fn oversized_upload_answer(s: &TestServer) -> String {
    s.head_only_answer(&format!(
        "POST /v1/plugins HTTP/1.1\r\nhost: bulkhead\r\nauthorization: Bearer {ADMIN_TOKEN}\r\ncontent-type: application/wasm\r\ncontent-length: {}\r\n\r\n",
        33 * 1024 * 1024
    ))
    .await
}

/// What the server answers to an upload by `token` that declares 30 MiB (under the limit) and
/// sends 16 bytes of it, waiting at most 5 s: an answer means it did not wait for the body.
async fn partial_upload_answer(s: &TestServer, token: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(s.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!(
        "POST /v1/plugins HTTP/1.1\r\nhost: bulkhead\r\nauthorization: Bearer {token}\r\nidempotency-key: big-1\r\ncontent-type: application/wasm\r\ncontent-length: {}\r\n\r\n\0asm0123456789ab",
        30 * 1024 * 1024
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("the server answers without waiting for the rest of the body")
        .unwrap();
    String::from_utf8_lossy(&answer[..read]).into_owned()
}

pub(crate) async fn provider_with(s: &TestServer, name: &str, digest: &str) {
    s.post(
        "/v1/providers",
        ADMIN_TOKEN,
        json!({ "name": name, "config": { "regions": "local" }, "limits": { "health_deadline_ms": 300 } }),
    )
    .await
    .assert_status(201);
    let activated = s
        .post(
            &format!("/v1/providers/{name}/activate"),
            ADMIN_TOKEN,
            json!({ "digest": digest }),
        )
        .await;
    assert_eq!(activated.assert_status(200)["plugin"]["digest"], digest);
}

pub(crate) async fn probe_digest(s: &TestServer, name: &str) -> String {
    let probe = provider_probe(s, name).await;
    let body = probe.assert_status(200);
    assert_eq!(body["status"], "healthy", "{body}");
    body["digest"].as_str().unwrap().to_owned()
}

async fn bundled_example_is_registered_once_and_serves(s: TestServer) {
    let list = s.get("/v1/providers", ADMIN_TOKEN).await;
    let items = list.assert_status(200)["items"].as_array().unwrap().clone();
    let names: Vec<&str> = items.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, bundled_names(), "every bundled plugin is a provider");
    let example = items.iter().find(|p| p["name"] == "example").unwrap();
    assert_eq!(example["name"], "example");
    assert_eq!(example["serving"], true);
    assert_eq!(example["plugin"]["name"], "example");
    assert_eq!(example["plugin"]["contract_version"], "0.7.0");
    let digest = example["plugin"]["digest"].as_str().unwrap().to_owned();
    assert_eq!(probe_digest(&s, "example").await, digest);
    let view = s.get("/v1/providers/example", ADMIN_TOKEN).await;
    // The probe above, and the background health probes.
    assert!(view.assert_status(200)["calls"]["ok"].as_u64().unwrap() >= 1);

    // A user (read scope) sees providers but cannot probe or change them.
    let user = s.user_with_session("viewer@example.com").await;
    s.get("/v1/providers/example", &user)
        .await
        .assert_status(200);
    s.post("/v1/providers/example/probe", &user, json!({}))
        .await
        .assert_problem(403, "forbidden");

    // A restart finds the provider configured: nothing is registered twice.
    let s = s.restart().await;
    let list = s.get("/v1/providers", ADMIN_TOKEN).await;
    assert_eq!(
        list.assert_status(200)["items"].as_array().unwrap().len(),
        bundled_names().len()
    );
    let history = s
        .get("/v1/providers/example/activations", ADMIN_TOKEN)
        .await;
    let history = history.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["action"], "bundled");
    assert_eq!(probe_digest(&s, "example").await, digest);
}

async fn uploads_are_validated_and_stored_by_digest(s: TestServer) {
    let hostile = upload(
        &s,
        ADMIN_TOKEN,
        plugin_bytes("bulkhead_plugin_hostile.wasm"),
    )
    .await;
    let stored = hostile.assert_status(201).clone();
    assert_eq!(stored["name"], "hostile");
    let digest = stored["digest"].as_str().unwrap();
    assert_eq!(digest.len(), 64);
    assert_eq!(
        hostile.header("location"),
        Some(format!("/v1/plugins/{digest}").as_str())
    );
    let again = upload(
        &s,
        ADMIN_TOKEN,
        plugin_bytes("bulkhead_plugin_hostile.wasm"),
    )
    .await;
    assert_eq!(again.assert_status(200)["digest"], digest);
    // The bundled example is stored already.
    upload(
        &s,
        ADMIN_TOKEN,
        plugin_bytes("bulkhead_plugin_example.wasm"),
    )
    .await
    .assert_status(200);
    let list = s.get("/v1/plugins", ADMIN_TOKEN).await;
    let stored = bundled_names().len() + 1;
    assert_eq!(
        list.assert_status(200)["items"].as_array().unwrap().len(),
        stored
    );
    let view = s.get(&format!("/v1/plugins/{digest}"), ADMIN_TOKEN).await;
    assert_eq!(view.assert_status(200)["contract_version"], "0.7.0");
    s.get("/v1/plugins/not-a-digest", ADMIN_TOKEN)
        .await
        .assert_problem(422, "invalid_request");
    s.get(&format!("/v1/plugins/{}", "0".repeat(64)), ADMIN_TOKEN)
        .await
        .assert_problem(404, "not_found");

    let future = upload(
        &s,
        ADMIN_TOKEN,
        plugin_bytes("bulkhead_plugin_future_contract.wasm"),
    )
    .await;
    future.assert_problem(422, "plugin_rejected");
    assert!(
        future.body["detail"].as_str().unwrap().contains("0.7.0"),
        "{}",
        future.text
    );
    let command = upload(&s, ADMIN_TOKEN, plugin_bytes("not-a-provider.wasm")).await;
    command.assert_problem(422, "plugin_rejected");
    assert!(command.text.contains("does not export"), "{}", command.text);
    upload(&s, ADMIN_TOKEN, b"\0asm not really".to_vec())
        .await
        .assert_problem(422, "plugin_rejected");
    let oversized = oversized_upload_answer(&s).await;
    assert!(
        oversized.starts_with("HTTP/1.1 413") && oversized.contains("body_too_large"),
        "{oversized}"
    );
    TestServer::send(
        s.request(Method::POST, "/v1/plugins", Some(ADMIN_TOKEN))
            .header("content-type", "text/plain")
            // Small: the refusal comes before the body is read, and a large unread body may
            // meet a closed connection instead of the answer.
            .body("a plugin, as text"),
    )
    .await
    .assert_problem(415, "unsupported_media_type");
    let user = s.user_with_session("uploader@example.com").await;
    let refused = upload(&s, &user, b"\0asm, but not a component".to_vec()).await;
    refused.assert_problem(403, "forbidden");
    assert_eq!(refused.header("connection"), Some("close"));
    // A non-administrator's upload is refused before its body is read (with an
    // Idempotency-Key too, which would otherwise buffer the body first).
    let partial = partial_upload_answer(&s, &user).await;
    assert!(
        partial.starts_with("HTTP/1.1 403") && partial.contains("forbidden"),
        "{partial}"
    );
    let list = s.get("/v1/plugins", ADMIN_TOKEN).await;
    assert_eq!(
        list.assert_status(200)["items"].as_array().unwrap().len(),
        stored,
        "a rejected upload stores nothing"
    );
}

async fn activation_checks_health_and_rollback_restores(s: TestServer) {
    let a = upload(&s, ADMIN_TOKEN, example_variant("a")).await;
    let a = a.assert_status(201)["digest"].as_str().unwrap().to_owned();
    let b = upload(&s, ADMIN_TOKEN, example_variant("b")).await;
    let b = b.assert_status(201)["digest"].as_str().unwrap().to_owned();
    let hostile = upload(
        &s,
        ADMIN_TOKEN,
        plugin_bytes("bulkhead_plugin_hostile.wasm"),
    )
    .await;
    let hostile = hostile.assert_status(201)["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    provider_with(&s, "edge", &a).await;
    assert_eq!(probe_digest(&s, "edge").await, a);

    // The hostile plugin's `health` never answers: activation is refused, `a` keeps serving.
    let refused = s
        .post(
            "/v1/providers/edge/activate",
            ADMIN_TOKEN,
            json!({ "digest": hostile }),
        )
        .await;
    refused.assert_problem(409, "plugin_unhealthy");
    assert!(
        refused.text.contains("did not answer within"),
        "{}",
        refused.text
    );
    assert_eq!(probe_digest(&s, "edge").await, a);
    // The refusal is one of the provider's events, naming the version and why.
    let events = s.get("/v1/providers/edge/events", ADMIN_TOKEN).await;
    let events = events.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    let refusal = events
        .iter()
        .find(|event| event["kind"] == "activation_refused")
        .unwrap_or_else(|| panic!("no refused activation in {events:?}"));
    let reason = refusal["reason"].as_str().unwrap();
    assert!(
        reason.contains(&hostile) && reason.contains("did not answer within"),
        "{reason}"
    );

    s.post(
        "/v1/providers/edge/activate",
        ADMIN_TOKEN,
        json!({ "digest": b }),
    )
    .await
    .assert_status(200);
    assert_eq!(probe_digest(&s, "edge").await, b);
    let rolled = s
        .post("/v1/providers/edge/rollback", ADMIN_TOKEN, json!({}))
        .await;
    let rolled = rolled.assert_status(200);
    assert_eq!(rolled["plugin"]["digest"], a.as_str());
    assert_eq!(rolled["previous_digest"], Value::Null, "nothing before `a`");
    assert_eq!(probe_digest(&s, "edge").await, a);
    // A second rollback does not toggle forward to `b`: there is nothing further back.
    s.post("/v1/providers/edge/rollback", ADMIN_TOKEN, json!({}))
        .await
        .assert_problem(409, "nothing_to_roll_back");
    assert_eq!(probe_digest(&s, "edge").await, a);

    let history = s.get("/v1/providers/edge/activations", ADMIN_TOKEN).await;
    let actions: Vec<(String, String)> = history.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                item["action"].as_str().unwrap().to_owned(),
                item["digest"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("activate".to_owned(), a.clone()),
            ("activate".to_owned(), b.clone()),
            ("rollback".to_owned(), a.clone())
        ]
    );
    let audit = s.get("/v1/audit-events?limit=200", ADMIN_TOKEN).await;
    let actions: Vec<&str> = audit.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|event| event["action"].as_str())
        .collect();
    for action in [
        "plugin.upload",
        "provider.create",
        "provider.activate",
        "provider.activation_refused",
        "provider.rollback",
    ] {
        assert!(
            actions.contains(&action),
            "{action} not audited: {actions:?}"
        );
    }

    s.post("/v1/providers/nowhere/rollback", ADMIN_TOKEN, json!({}))
        .await
        .assert_problem(404, "not_found");
    s.post("/v1/providers", ADMIN_TOKEN, json!({ "name": "fresh" }))
        .await
        .assert_status(201);
    s.post("/v1/providers/fresh/rollback", ADMIN_TOKEN, json!({}))
        .await
        .assert_problem(409, "nothing_to_roll_back");
    s.post("/v1/providers/fresh/probe", ADMIN_TOKEN, json!({}))
        .await
        .assert_problem(409, "provider_not_serving");
    // With no plugin, a provider says so instead of "healthy", and refuses calls.
    let fresh = s.get("/v1/providers/fresh", ADMIN_TOKEN).await;
    let fresh = fresh.assert_status(200);
    assert_eq!(fresh["state"], "no_plugin", "{fresh}");
    assert_eq!(fresh["health"], Value::Null, "{fresh}");
    assert!(
        fresh["health_reason"]
            .as_str()
            .unwrap()
            .contains("no plugin")
    );
    s.post(
        "/v1/providers/fresh/instances",
        ADMIN_TOKEN,
        json!({ "instance_key": "web-1", "region": "local", "artifact": "a", "port": 80 }),
    )
    .await
    .assert_problem(409, "provider_not_serving");

    // Going forward again is an activation of the newer digest; rollback then returns to `a`.
    s.post(
        "/v1/providers/edge/activate",
        ADMIN_TOKEN,
        json!({ "digest": b }),
    )
    .await
    .assert_status(200);
    assert_eq!(probe_digest(&s, "edge").await, b);
    let rolled = s
        .post("/v1/providers/edge/rollback", ADMIN_TOKEN, json!({}))
        .await;
    assert_eq!(rolled.assert_status(200)["plugin"]["digest"], a.as_str());

    // Disabled: no calls, until enabled again.
    s.patch(
        "/v1/providers/edge",
        ADMIN_TOKEN,
        json!({ "enabled": false }),
    )
    .await
    .assert_status(200);
    s.post("/v1/providers/edge/probe", ADMIN_TOKEN, json!({}))
        .await
        .assert_problem(409, "provider_not_serving");
    let enabled = s
        .patch(
            "/v1/providers/edge",
            ADMIN_TOKEN,
            json!({ "enabled": true }),
        )
        .await;
    assert_eq!(enabled.assert_status(200)["serving"], true);
    assert_eq!(probe_digest(&s, "edge").await, a);
}

async fn hot_swap_under_concurrent_calls_loses_no_call(s: TestServer) {
    let a = upload(&s, ADMIN_TOKEN, example_variant("swap-a")).await;
    let a = a.assert_status(201)["digest"].as_str().unwrap().to_owned();
    let b = upload(&s, ADMIN_TOKEN, example_variant("swap-b")).await;
    let b = b.assert_status(201)["digest"].as_str().unwrap().to_owned();
    provider_with(&s, "swap", &a).await;

    let s = Arc::new(s);
    let swapped = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (s, swapped, stop) = (s.clone(), swapped.clone(), stop.clone());
            tokio::spawn(async move {
                // (digest that answered, whether the swap had completed before the call began)
                let mut answers: Vec<(String, bool)> = Vec::new();
                while !stop.load(Relaxed) {
                    let after_swap = swapped.load(Relaxed);
                    answers.push((probe_digest(&s, "swap").await, after_swap));
                }
                answers
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    s.post(
        "/v1/providers/swap/activate",
        ADMIN_TOKEN,
        json!({ "digest": b }),
    )
    .await
    .assert_status(200);
    swapped.store(true, Relaxed);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Relaxed);

    let mut answers = Vec::new();
    for caller in callers {
        // A failed call panics inside `probe_digest`, which fails the join.
        answers.extend(caller.await.expect("every call answered healthy"));
    }
    let on_a = answers.iter().filter(|(digest, _)| *digest == a).count();
    let on_b = answers.iter().filter(|(digest, _)| *digest == b).count();
    assert_eq!(on_a + on_b, answers.len());
    assert!(on_a > 0 && on_b > 0, "calls on a: {on_a}, on b: {on_b}");
    assert!(
        answers.iter().all(|(digest, after)| !after || *digest == b),
        "a call that began after the swap answered on the old version"
    );
    let view = s.get("/v1/providers/swap", ADMIN_TOKEN).await;
    let calls = &view.assert_status(200)["calls"];
    assert!(
        calls["ok"].as_u64().unwrap() as usize >= answers.len(),
        "the provider's stats count every call across versions (and the background probes): {calls}"
    );
}

async fn secrets_are_write_only_and_settings_validated(s: TestServer) {
    let secret = "s3cr3t-value-never-shown";
    let created = s
        .post(
            "/v1/providers",
            ADMIN_TOKEN,
            json!({ "name": "vault", "secrets": { "api_key": secret }, "allowlist": ["api.example.com:443"] }),
        )
        .await;
    let body = created.assert_status(201).clone();
    assert_eq!(body["secret_names"], json!(["api_key"]));
    assert!(!created.text.contains(secret));
    let etag = created.header("etag").unwrap().to_owned();

    let patched = TestServer::send(
        s.request(Method::PATCH, "/v1/providers/vault", Some(ADMIN_TOKEN))
            .header("if-match", &etag)
            .json(&json!({ "secrets": { "api_key": null, "other": "x-secret-2" }, "config": { "zone": "z1" } })),
    )
    .await;
    let body = patched.assert_status(200).clone();
    assert_eq!(body["secret_names"], json!(["other"]));
    assert_eq!(body["config"], json!({ "zone": "z1" }));
    // The endpoints in its configuration are reachable without listing them.
    let endpoints = s
        .patch(
            "/v1/providers/vault",
            ADMIN_TOKEN,
            json!({ "config": { "zone": "z1", "endpoint": "https://api.example.com:8443/v1", "agents": "http://10.0.0.1:7070, http://10.0.0.2:7070", "note": "not a URL" } }),
        )
        .await;
    assert_eq!(
        endpoints.assert_status(200)["effective_allowlist"],
        json!([
            "api.example.com:443",
            "10.0.0.1:7070",
            "10.0.0.2:7070",
            "api.example.com:8443"
        ])
    );
    assert_eq!(endpoints.body["allowlist"], json!(["api.example.com:443"]));
    assert!(!patched.text.contains("x-secret-2"));
    TestServer::send(
        s.request(Method::PATCH, "/v1/providers/vault", Some(ADMIN_TOKEN))
            .header("if-match", &etag)
            .json(&json!({ "enabled": false })),
    )
    .await
    .assert_problem(412, "precondition_failed");

    for view in [
        s.get("/v1/providers/vault", ADMIN_TOKEN).await,
        s.get("/v1/providers", ADMIN_TOKEN).await,
        s.get("/v1/audit-events?limit=200", ADMIN_TOKEN).await,
    ] {
        assert_eq!(view.status, 200);
        assert!(
            !view.text.contains(secret) && !view.text.contains("x-secret-2"),
            "{}",
            view.text
        );
    }

    let invalid: [(Value, &str); 7] = [
        (json!({ "allowlist": ["no-port"] }), "allowlist"),
        // More than a provider's share of the host's calls.
        (
            json!({ "limits": { "max_concurrent_calls": 64 } }),
            "max_concurrent_calls",
        ),
        (json!({ "allowlist": ["bad host:80"] }), "allowlist"),
        (json!({ "limits": { "memory_mib": 4096 } }), "memory_mib"),
        (
            json!({ "limits": { "call_deadline_ms": 1 } }),
            "call_deadline_ms",
        ),
        (json!({ "config": { "bad key": "x" } }), "keys"),
        (json!({ "enabled": "yes" }), ""),
    ];
    for (update, mentions) in invalid {
        let reply = s
            .patch("/v1/providers/vault", ADMIN_TOKEN, update.clone())
            .await;
        reply.assert_problem(
            422,
            if mentions.is_empty() {
                "invalid_body"
            } else {
                "invalid_request"
            },
        );
        assert!(reply.text.contains(mentions), "{update}: {}", reply.text);
    }
    s.patch(
        "/v1/providers/vault",
        ADMIN_TOKEN,
        json!({ "colour": "red" }),
    )
    .await
    .assert_problem(422, "invalid_body");
    s.post("/v1/providers", ADMIN_TOKEN, json!({ "name": "vault" }))
        .await
        .assert_problem(409, "provider_exists");
    s.post(
        "/v1/providers",
        ADMIN_TOKEN,
        json!({ "name": "Not A Slug" }),
    )
    .await
    .assert_problem(422, "invalid_request");
    let user = s.user_with_session("meddler@example.com").await;
    s.patch("/v1/providers/vault", &user, json!({ "enabled": false }))
        .await
        .assert_problem(403, "forbidden");
}

/// A stand-in for a provider's status page: answers `GET /status` with the status code in
/// `status`, counting the requests.
async fn status_page(status: Arc<std::sync::atomic::AtomicU16>) -> u16 {
    let app = axum::Router::new().route(
        "/status",
        axum::routing::get(move || {
            let code = status.load(Relaxed);
            async move { axum::http::StatusCode::from_u16(code).unwrap() }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

db_tests!(
    instances_are_provisioned_through_the_plugin,
    a_failing_provider_opens_its_breaker_alone_and_recovers,
);

async fn instances_are_provisioned_through_the_plugin(s: TestServer) {
    let create = json!({ "instance_key": "web-1", "region": "local", "artifact": "shop/web:1", "port": 8080, "env": { "A": "1" } });
    let made = s
        .post(
            "/v1/providers/example/instances",
            ADMIN_TOKEN,
            create.clone(),
        )
        .await;
    let body = made.assert_status(201).clone();
    assert_eq!(body["provider_id"], "example-web-1");
    assert_eq!(body["state"], "running");
    assert_eq!(
        made.header("location"),
        Some("/v1/providers/example/instances/web-1")
    );
    let again = s
        .post(
            "/v1/providers/example/instances",
            ADMIN_TOKEN,
            create.clone(),
        )
        .await;
    assert_eq!(again.assert_status(201)["provider_id"], "example-web-1");
    let view = s
        .get("/v1/providers/example/instances/web-1", ADMIN_TOKEN)
        .await;
    assert_eq!(view.assert_status(200)["instance_key"], "web-1");
    let list = s.get("/v1/providers/example/instances", ADMIN_TOKEN).await;
    assert!(list.assert_status(200)["items"].is_array());
    s.delete("/v1/providers/example/instances/web-1", ADMIN_TOKEN)
        .await
        .assert_status(204);

    let mars = json!({ "instance_key": "web-2", "region": "mars", "artifact": "x", "port": 80 });
    let refused = s
        .post("/v1/providers/example/instances", ADMIN_TOKEN, mars)
        .await;
    refused.assert_problem(422, "invalid_spec");
    // Refused by the host from the plugin's `info().regions`, naming them.
    assert!(
        refused
            .text
            .contains("not one of the plugin's regions: local"),
        "{}",
        refused.text
    );
    s.post(
        "/v1/providers/example/instances",
        ADMIN_TOKEN,
        json!({ "instance_key": "Bad Key", "region": "local", "artifact": "x", "port": 80 }),
    )
    .await
    .assert_problem(422, "invalid_request");
    s.post(
        "/v1/providers/nowhere/instances",
        ADMIN_TOKEN,
        create.clone(),
    )
    .await
    .assert_problem(404, "not_found");
    let user = s.user_with_session("operator@example.com").await;
    s.post("/v1/providers/example/instances", &user, create.clone())
        .await
        .assert_problem(403, "forbidden");

    // Drained: no new instances, but existing ones can still be described and removed.
    let drained = s
        .patch(
            "/v1/providers/example",
            ADMIN_TOKEN,
            json!({ "drained": true }),
        )
        .await;
    assert_eq!(drained.assert_status(200)["state"], "drained");
    s.post(
        "/v1/providers/example/instances",
        ADMIN_TOKEN,
        create.clone(),
    )
    .await
    .assert_problem(409, "provider_drained");
    s.get("/v1/providers/example/instances/web-1", ADMIN_TOKEN)
        .await
        .assert_status(200);
    let disabled = s
        .patch(
            "/v1/providers/example",
            ADMIN_TOKEN,
            json!({ "drained": false, "enabled": false }),
        )
        .await;
    assert_eq!(disabled.assert_status(200)["state"], "disabled");
    s.get("/v1/providers/example/instances/web-1", ADMIN_TOKEN)
        .await
        .assert_problem(409, "provider_disabled");
}

async fn a_failing_provider_opens_its_breaker_alone_and_recovers(s: TestServer) {
    let status = Arc::new(std::sync::atomic::AtomicU16::new(200));
    let port = status_page(status.clone()).await;
    s.patch(
        "/v1/providers/example",
        ADMIN_TOKEN,
        json!({ "config": { "regions": "local", "health_url": format!("http://127.0.0.1:{port}/status") }, "allowlist": [format!("127.0.0.1:{port}")] }),
    )
    .await
    .assert_status(200);
    let other = upload(&s, ADMIN_TOKEN, example_variant("bystander")).await;
    let other = other.assert_status(201)["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    provider_with(&s, "bystander", &other).await;
    state_wait(&s, "example", "healthy").await;

    // The provider starts refusing the plugin's credentials: unavailable at once.
    status.store(401, Relaxed);
    let opened_after = state_wait(&s, "example", "unavailable").await;
    assert!(
        opened_after < std::time::Duration::from_secs(5),
        "{opened_after:?}"
    );
    let refused = s
        .post(
            "/v1/providers/example/instances",
            ADMIN_TOKEN,
            json!({ "instance_key": "web-1", "region": "local", "artifact": "x", "port": 80 }),
        )
        .await;
    refused.assert_problem(503, "provider_unavailable");
    assert!(refused.header("retry-after").is_some());
    // The other provider is untouched and keeps serving.
    assert_eq!(provider_state(&s, "bystander").await, "healthy");
    s.post(
        "/v1/providers/bystander/instances",
        ADMIN_TOKEN,
        json!({ "instance_key": "web-1", "region": "local", "artifact": "x", "port": 80 }),
    )
    .await
    .assert_status(201);
    // (The metrics registry is the process's, shared by this binary's test servers: only the
    // counter of changes, which never goes down, is checked.)
    let metrics = TestServer::send(s.request(Method::GET, "/metrics", None)).await;
    assert!(
        metrics
            .text
            .contains(r#"provider_health_changes_total{provider="example",to="unavailable"}"#),
        "{}",
        metrics.text
    );

    // Recovery: a probe half-opens the breaker and the next success closes it.
    status.store(200, Relaxed);
    state_wait(&s, "example", "healthy").await;
    let events = s.get("/v1/providers/example/events", ADMIN_TOKEN).await;
    let changes: Vec<(String, String)> = events.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["from"].as_str().unwrap().to_owned(),
                e["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("healthy".to_owned(), "unavailable".to_owned()),
            ("unavailable".to_owned(), "degraded".to_owned()),
            ("degraded".to_owned(), "healthy".to_owned()),
        ]
    );
    let first = &events.body["items"][0];
    assert!(
        first["reason"].as_str().unwrap().contains("unauthorized"),
        "{first}"
    );
    let bystander = s.get("/v1/providers/bystander/events", ADMIN_TOKEN).await;
    assert_eq!(bystander.assert_status(200)["items"], json!([]));
}

/// A caller who is not an administrator (a session, or a `read` token) sees each provider's
/// name, state and health only: no settings, endpoints, health reasons (the cloud's error
/// text), events or activation history.
async fn provider_details_are_for_administrators(s: TestServer) {
    let session = s.user_with_session("reader@example.com").await;
    let token = s
        .post(
            "/v1/tokens",
            &session,
            json!({ "name": "ro", "scopes": ["read"] }),
        )
        .await;
    let token = token.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    s.patch(
        "/v1/providers/example",
        ADMIN_TOKEN,
        json!({ "config": { "regions": "local", "health_url": "http://127.0.0.1:9/status-secret-path" } }),
    )
    .await
    .assert_status(200);
    let admin_view = s.get("/v1/providers/example", ADMIN_TOKEN).await;
    let admin_view = admin_view.assert_status(200);
    assert!(
        admin_view["config"]["health_url"].is_string(),
        "{admin_view}"
    );
    assert!(admin_view["effective_allowlist"].is_array());
    assert!(admin_view["health_reason"].is_string());
    for caller in [&session, &token] {
        let view = s.get("/v1/providers/example", caller).await;
        let fields: Vec<&String> = view
            .assert_status(200)
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(fields, ["health", "name", "state"], "{}", view.text);
        let list = s.get("/v1/providers", caller).await;
        for item in list.assert_status(200)["items"].as_array().unwrap() {
            let fields: Vec<&String> = item.as_object().unwrap().keys().collect();
            assert_eq!(fields, ["health", "name", "state"], "{item}");
        }
        for path in [
            "/v1/providers/example/events",
            "/v1/providers/example/activations",
        ] {
            let refused = s.get(path, caller).await;
            assert_eq!(refused.status, 403, "{path}: {}", refused.text);
        }
    }
    assert!(
        !s.get("/v1/providers", &token)
            .await
            .text
            .contains("status-secret-path"),
        "no endpoint leaks into the list"
    );
}
