//! API conventions shared by every endpoint: problem details for bad input, body limits,
//! idempotency keys, request ids, CORS and compression.

use reqwest::Method;
use serde_json::json;

use bulkhead::app::shared::idempotency::{Finished, IdempotencyStart, StoredResponse};
use bulkhead::db::IDEMPOTENCY_CLAIM;

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, TestServer};

db_tests!(
    bad_input_gets_problem_details,
    idempotency_keys_replay_and_refuse_reuse,
    cors_compression_and_request_ids,
    lists_have_etags_and_answer_304,
    lists_of_kept_views_follow_every_change,
    slow_requests_time_out_and_write_nothing,
);

async fn bad_input_gets_problem_details(s: TestServer) {
    let raw = |method: Method, path: &str, content_type: &str, body: Vec<u8>| {
        TestServer::send(
            s.request(method, path, Some(ADMIN_TOKEN))
                .header("content-type", content_type)
                .body(body),
        )
    };
    let json_type = "application/json";
    // An answer given after the body was read keeps the connection; one given before (here a
    // bad token, refused before the body is looked at) closes it and says so, so that the
    // client does not reuse a connection whose unread body the server drops.
    let read = raw(
        Method::POST,
        "/v1/projects",
        json_type,
        br#"{"name":""}"#.to_vec(),
    )
    .await;
    read.assert_problem(422, "invalid_request");
    assert_eq!(read.header("connection"), None);
    let unread = TestServer::send(
        s.request(
            Method::POST,
            "/v1/projects",
            Some("bh_not_a_token_at_all_0123456789"),
        )
        .header("content-type", json_type)
        .body(r#"{"name":"never read"}"#),
    )
    .await;
    unread.assert_problem(401, "unauthenticated");
    assert_eq!(unread.header("connection"), Some("close"));
    raw(
        Method::POST,
        "/v1/projects",
        json_type,
        b"{\"name\": ".to_vec(),
    )
    .await
    .assert_problem(400, "malformed_json");
    raw(Method::POST, "/v1/projects", json_type, b"[1, 2]".to_vec())
        .await
        .assert_problem(422, "invalid_body");
    raw(
        Method::POST,
        "/v1/projects",
        json_type,
        b"{\"name\": 5}".to_vec(),
    )
    .await
    .assert_problem(422, "invalid_body");
    raw(Method::POST, "/v1/projects", json_type, b"{}".to_vec())
        .await
        .assert_problem(422, "invalid_body");
    raw(
        Method::POST,
        "/v1/projects",
        json_type,
        b"{\"name\": \"a\", \"owner\": \"me\"}".to_vec(),
    )
    .await
    .assert_problem(422, "invalid_body");
    raw(
        Method::POST,
        "/v1/projects",
        "text/plain",
        b"{\"name\": \"a\"}".to_vec(),
    )
    .await
    .assert_problem(415, "unsupported_media_type");
    // A body over the limit is refused from its declared length, before any of it is read (it
    // is never sent: a client still writing when the server closes could lose the answer).
    let oversized = s
        .head_only_answer(&format!(
            "POST /v1/projects HTTP/1.1\r\nhost: bulkhead\r\nauthorization: Bearer {ADMIN_TOKEN}\r\ncontent-type: {json_type}\r\ncontent-length: {}\r\n\r\n",
            100 * 1024
        ))
        .await;
    assert!(
        oversized.starts_with("HTTP/1.1 413")
            && oversized.contains("application/problem+json")
            && oversized.contains("\"body_too_large\""),
        "{oversized}"
    );
    s.get("/v1/projects/not-a-uuid", ADMIN_TOKEN)
        .await
        .assert_problem(400, "invalid_path");
    s.get(
        "/v1/projects/00000000-0000-0000-0000-000000000000/services/xyz",
        ADMIN_TOKEN,
    )
    .await
    .assert_problem(400, "invalid_path");
    s.get("/v1/no-such-thing", ADMIN_TOKEN)
        .await
        .assert_problem(404, "not_found");
    let wrong_method = s
        .call(Method::PUT, "/v1/projects", Some(ADMIN_TOKEN), None)
        .await;
    wrong_method.assert_problem(405, "method_not_allowed");
    assert!(
        wrong_method
            .header("allow")
            .is_some_and(|allow| allow.contains("GET"))
    );
    let bad_header = TestServer::send(
        s.request(Method::GET, "/v1/me", None)
            .header("authorization", "Basic Zm9vOmJhcg=="),
    )
    .await;
    bad_header.assert_problem(401, "unauthenticated");
    let nothing_was_created = s.get("/v1/projects", ADMIN_TOKEN).await;
    assert_eq!(
        nothing_was_created.body["items"],
        json!([]),
        "no bad request created anything"
    );
}

async fn idempotency_keys_replay_and_refuse_reuse(s: TestServer) {
    let create = |key: &str, name: &str| {
        TestServer::send(
            s.request(Method::POST, "/v1/projects", Some(ADMIN_TOKEN))
                .header("idempotency-key", key)
                .json(&json!({ "name": name })),
        )
    };
    let first = create("key-1", "shop").await;
    first.assert_status(201);
    let replay = create("key-1", "shop").await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body, "the stored response is replayed");
    assert_eq!(replay.header("location"), first.header("location"));
    create("key-1", "other")
        .await
        .assert_problem(422, "idempotency_key_reused");
    assert_eq!(
        s.get("/v1/projects", ADMIN_TOKEN).await.body["items"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "created once"
    );

    // Failed requests are replayed too (4xx), so a retry cannot change the outcome silently.
    let invalid = create("key-2", "").await;
    invalid.assert_problem(422, "invalid_request");
    assert_eq!(
        create("key-2", "").await.header("idempotent-replayed"),
        Some("true")
    );

    // Keys belong to their user: another user's same key is a new request.
    let other = s.user_with_session("idem@example.com").await;
    let theirs = TestServer::send(
        s.request(Method::POST, "/v1/projects", Some(&other))
            .header("idempotency-key", "key-1")
            .json(&json!({ "name": "shop" })),
    )
    .await;
    theirs.assert_status(201);
    assert!(theirs.header("idempotent-replayed").is_none());
    assert_ne!(theirs.body["id"], first.body["id"]);

    // Concurrent retries of one key create one project.
    let results = futures::future::join_all((0..4).map(|_| create("key-3", "burst"))).await;
    let created: Vec<_> = results.iter().filter(|r| r.status == 201).collect();
    assert!(!created.is_empty());
    assert!(
        created
            .iter()
            .all(|r| r.body["id"] == created[0].body["id"])
    );
    assert!(
        results.iter().all(|r| r.status == 201 || r.status == 409),
        "{results:?}"
    );
    let too_long = create(&"k".repeat(300), "x").await;
    too_long.assert_problem(400, "invalid_header");

    // A request whose write committed but which answered a server error (its answer lost with
    // a primary) keeps its key: a retry is answered what was kept, and never runs it again.
    // One that failed before any write committed releases its key: a retry runs.
    let app = s.app();
    let lost = StoredResponse {
        status: 409,
        headers: vec![],
        body: b"lost".to_vec(),
    };
    for (key, commits) in [("lost-1", true), ("lost-2", false)] {
        let started = app.idempotency_start("credential-x", key, "hash").await;
        assert!(matches!(started, Ok(IdempotencyStart::Proceed)));
        let claim = ("credential-x".to_owned(), key.to_owned());
        IDEMPOTENCY_CLAIM
            .scope(claim, async {
                let txn = bulkhead::db::begin_write(&app.db).await.unwrap();
                if commits {
                    txn.commit().await.unwrap();
                } else {
                    txn.rollback().await.unwrap();
                }
            })
            .await;
        let failed = Finished::Failed { lost: lost.clone() };
        app.idempotency_finish("credential-x", key, failed, &[])
            .await
            .unwrap();
        let again = app.idempotency_start("credential-x", key, "hash").await;
        match (commits, again) {
            (true, Ok(IdempotencyStart::Replay(stored, _))) => assert_eq!(stored.body, b"lost"),
            (false, Ok(IdempotencyStart::Proceed)) => {}
            (commits, _) => panic!("took effect: {commits}, and not answered as it should"),
        }
    }
}

async fn cors_compression_and_request_ids(s: TestServer) {
    let preflight = s
        .request(Method::OPTIONS, "/v1/projects", None)
        .header("origin", "https://dashboard.example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type,idempotency-key",
        );
    let preflight = TestServer::send(preflight).await;
    assert!(preflight.status < 300, "preflight: {}", preflight.status);
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some("https://dashboard.example.com")
    );
    // A dashboard resumes event streams with `Last-Event-ID`, and reads `Retry-After`.
    let stream = s
        .request(Method::OPTIONS, "/v1/routing-table/watch", None)
        .header("origin", "https://dashboard.example.com")
        .header("access-control-request-method", "GET")
        .header(
            "access-control-request-headers",
            "authorization,last-event-id",
        );
    let stream = TestServer::send(stream).await;
    let allowed = stream
        .header("access-control-allow-headers")
        .unwrap_or_default();
    assert!(allowed.contains("last-event-id"), "{allowed}");
    let answered = TestServer::send(
        s.request(Method::GET, "/v1/projects", Some(ADMIN_TOKEN))
            .header("origin", "https://dashboard.example.com"),
    )
    .await;
    let exposed = answered
        .header("access-control-expose-headers")
        .unwrap_or_default();
    assert!(exposed.contains("retry-after"), "{exposed}");
    let foreign = s
        .request(Method::OPTIONS, "/v1/projects", None)
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST");
    let foreign = TestServer::send(foreign).await;
    assert!(foreign.header("access-control-allow-origin").is_none());

    let many = (0..30).map(|i| json!({ "name": format!("compressible project {i}") }));
    for body in many {
        let created = s.post("/v1/projects", ADMIN_TOKEN, body).await;
        created.assert_status(201);
        // The body was read: the connection is kept for the next request.
        assert_eq!(created.header("connection"), None);
    }
    let compressed = s
        .request(Method::GET, "/v1/projects", Some(ADMIN_TOKEN))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(
        compressed
            .headers()
            .get("content-encoding")
            .and_then(|v| v.to_str().ok()),
        Some("gzip")
    );

    let generated = s.get("/v1/me", ADMIN_TOKEN).await;
    let id = generated
        .header("x-request-id")
        .expect("a request id is generated");
    assert!(uuid::Uuid::parse_str(id).is_ok());

    // A hostile request id (too long for the audit log) is replaced, and the write succeeds.
    let hostile = "x".repeat(5000);
    let request = s
        .request(Method::POST, "/v1/projects", Some(ADMIN_TOKEN))
        .header("x-request-id", &hostile)
        .json(&json!({ "name": "p" }));
    let reply = TestServer::send(request).await;
    reply.assert_status(201);
    let replaced = reply.header("x-request-id").unwrap();
    assert!(uuid::Uuid::parse_str(replaced).is_ok(), "{replaced}");
}

async fn lists_have_etags_and_answer_304(s: TestServer) {
    s.post("/v1/projects", ADMIN_TOKEN, json!({ "name": "a" }))
        .await
        .assert_status(201);
    let first = s.get("/v1/projects", ADMIN_TOKEN).await;
    let etag = first.header("etag").expect("lists have an ETag").to_owned();
    assert!(etag.starts_with("W/"));
    let cached = TestServer::send(
        s.request(Method::GET, "/v1/projects", Some(ADMIN_TOKEN))
            .header("if-none-match", &etag),
    )
    .await;
    assert_eq!(cached.status, 304);
    s.post("/v1/projects", ADMIN_TOKEN, json!({ "name": "b" }))
        .await
        .assert_status(201);
    let changed = TestServer::send(
        s.request(Method::GET, "/v1/projects", Some(ADMIN_TOKEN))
            .header("if-none-match", &etag),
    )
    .await;
    assert_eq!(changed.status, 200, "the list changed, so its ETag did");
    assert_ne!(changed.header("etag"), Some(etag.as_str()));
}

/// Services and environments are listed from views kept by revision: a change, an addition or
/// a removal shows in the next read, and the tag is the page's (equal pages, equal tags).
async fn lists_of_kept_views_follow_every_change(s: TestServer) {
    let p = s.project_with_service("kept").await;
    let services = format!("/v1/projects/{}/services", p.id);
    let read = |path: String, etag: Option<String>| {
        let mut request = s.request(Method::GET, &path, Some(&p.owner));
        if let Some(etag) = etag {
            request = request.header("if-none-match", etag);
        }
        TestServer::send(request)
    };
    let first = read(services.clone(), None).await;
    assert_eq!(first.assert_status(200)["items"][0]["replicas"], 1);
    let etag = first.header("etag").unwrap().to_owned();
    assert_eq!(read(services.clone(), Some(etag.clone())).await.status, 304);

    let service = format!("{services}/{}", p.service);
    s.patch(
        &service,
        &p.owner,
        json!({ "replicas": 3, "regions": ["eu"] }),
    )
    .await
    .assert_status(200);
    let changed = read(services.clone(), Some(etag.clone())).await;
    let item = &changed.assert_status(200)["items"][0];
    assert_eq!(
        (item["replicas"].clone(), item["regions"].clone()),
        (json!(3), json!(["eu"]))
    );
    let changed_etag = changed.header("etag").unwrap().to_owned();
    assert_ne!(changed_etag, etag);
    assert_eq!(
        changed.body["items"][0],
        s.get(&service, &p.owner).await.assert_status(200).clone(),
        "a listed view is the view read alone"
    );

    // A second service: a page of one has a cursor, which its tag includes.
    let environment = changed.body["items"][0]["environment_id"].as_str().unwrap();
    let second = s
        .service_create(
            &p.owner,
            &p.id,
            environment,
            json!({ "name": "api", "source": { "type": "artifact", "image": "shop/api:1" }, "port": 8080 }),
        )
        .await;
    let both = read(services.clone(), None).await;
    assert_eq!(
        both.assert_status(200)["items"].as_array().unwrap().len(),
        2
    );
    let one = read(format!("{services}?limit=1"), None).await;
    let cursor = one.assert_status(200)["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(one.header("etag"), both.header("etag"));
    let next = read(format!("{services}?limit=1&cursor={cursor}"), None).await;
    assert_eq!(next.assert_status(200)["items"][0]["id"], json!(second));
    assert_ne!(next.header("etag"), one.header("etag"));

    // Removed: the page is again the one before, and so is its tag.
    s.delete(&format!("{services}/{second}"), &p.owner)
        .await
        .assert_status(204);
    let after = read(services.clone(), Some(changed_etag.clone())).await;
    assert_eq!(
        after.status, 304,
        "the same page as before the second service"
    );

    // Environments too: a rename shows at once.
    let environments = format!("/v1/projects/{}/environments", p.id);
    let listed = read(environments.clone(), None).await;
    assert_eq!(listed.assert_status(200)["items"][0]["name"], "production");
    s.patch(
        &format!("{environments}/{environment}"),
        &p.owner,
        json!({ "name": "prod" }),
    )
    .await
    .assert_status(200);
    let renamed = read(environments, listed.header("etag").map(str::to_owned)).await;
    assert_eq!(renamed.assert_status(200)["items"][0]["name"], "prod");
}

async fn slow_requests_time_out_and_write_nothing(s: TestServer) {
    // The same database, with a request timeout far shorter than a password hash takes.
    let email = "slow@example.com";
    s.user_create(email).await;
    let s = s
        .restart_with(|settings| settings.request_timeout = std::time::Duration::from_millis(1))
        .await;
    let login = s
        .call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({ "email": email, "password": crate::support::PASSWORD })),
        )
        .await;
    login.assert_problem(408, "timeout");
    // The abandoned login wrote nothing: no session, no audit event, no last-login time.
    let s = s
        .restart_with(|settings| settings.request_timeout = std::time::Duration::from_secs(30))
        .await;
    let users = s.get("/v1/users", ADMIN_TOKEN).await;
    let user = users.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == email)
        .unwrap()
        .clone();
    assert!(user["last_login_at"].is_null(), "{user}");
    let events = s.get("/v1/audit-events?limit=200", ADMIN_TOKEN).await;
    assert!(!events.text.contains("session.login"), "{}", events.text);
}
