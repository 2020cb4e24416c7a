//! The holes found by trying the API as an attacker (issue 10), each with the request that
//! reproduced it: a secret turned plain by a PATCH, a `write` token setting a password, an
//! idempotent replay across credentials, unthrottled logins, a refresh token used twice at
//! once, and tokens outliving the token that minted them.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, Backend, PASSWORD, Reply, TestServer, database_fresh};

db_tests!(
    a_secret_stays_secret_when_its_value_is_left_out,
    only_a_password_session_changes_a_password,
    a_password_change_ends_every_session,
    idempotent_replays_belong_to_one_credential,
    a_replay_is_authorized_like_a_fresh_request,
    a_refresh_token_used_twice_at_once_revokes_the_session,
    tokens_minted_by_tokens_die_with_them,
    credentials_are_not_cached,
);

async fn token_create(s: &TestServer, creator: &str, scopes: &[&str]) -> String {
    let created = s
        .post(
            "/v1/tokens",
            creator,
            json!({ "name": "t", "scopes": scopes }),
        )
        .await;
    created.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn a_secret_stays_secret_when_its_value_is_left_out(s: TestServer) {
    let owner = s.user_with_session("sec-owner@example.com").await;
    let project = s.project_create(&owner, "p").await;
    let environment = s.environment_create(&owner, &project, "production").await;
    let service = s
        .service_create(
            &owner,
            &project,
            &environment,
            json!({
                "name": "web", "port": 8080,
                "source": { "type": "artifact", "image": "shop/web:1" },
                "variables": [
                    { "name": "DB_PASSWORD", "value": "s3cret-value", "secret": true },
                    { "name": "MODE", "value": "prod" },
                ],
            }),
        )
        .await;
    let path = format!("/v1/projects/{project}/services/{service}");
    // The request that revealed the secret: the value left out keeps the value and the flag.
    let kept = s
        .patch(
            &path,
            &owner,
            json!({ "variables": [{ "name": "DB_PASSWORD" }, { "name": "MODE" }] }),
        )
        .await;
    kept.assert_status(200);
    assert!(!kept.text.contains("s3cret-value"), "{}", kept.text);
    assert_eq!(
        kept.body["variables"][0],
        json!({ "name": "DB_PASSWORD", "secret": true })
    );
    assert_eq!(kept.body["variables"][1]["value"], "prod");
    // Asking for it plain without a new value is refused, without the value in the answer.
    let refused = s
        .patch(
            &path,
            &owner,
            json!({ "variables": [{ "name": "DB_PASSWORD", "secret": false }] }),
        )
        .await;
    refused.assert_problem(422, "invalid_request");
    assert!(!refused.text.contains("s3cret-value"));
    let read = s.get(&path, &owner).await;
    assert!(!read.text.contains("s3cret-value"));
    // With a new value it may become plain; a plain variable may become secret in place.
    let plain = s
        .patch(
            &path,
            &owner,
            json!({ "variables": [
                { "name": "DB_PASSWORD", "secret": false, "value": "now-public" },
                { "name": "MODE", "secret": true },
            ] }),
        )
        .await;
    plain.assert_status(200);
    assert_eq!(plain.body["variables"][0]["value"], "now-public");
    assert_eq!(
        plain.body["variables"][1],
        json!({ "name": "MODE", "secret": true })
    );
}

async fn only_a_password_session_changes_a_password(s: TestServer) {
    // The bootstrap administrator has no password; its `write` token must not give it one.
    let write = token_create(&s, ADMIN_TOKEN, &["write"]).await;
    let attempt = s
        .patch(
            "/v1/me",
            &write,
            json!({ "password": "taken over by a token" }),
        )
        .await;
    attempt.assert_problem(403, "session_required");
    s.patch(
        "/v1/me",
        ADMIN_TOKEN,
        json!({ "password": "taken over by a token" }),
    )
    .await
    .assert_problem(403, "session_required");
    let login = s
        .call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({ "email": "admin@example.com", "password": "taken over by a token" })),
        )
        .await;
    login.assert_problem(401, "unauthenticated");
    // A name is still the token's to change.
    s.patch("/v1/me", &write, json!({ "name": "Root" }))
        .await
        .assert_status(200);

    // A user's own session needs the current password.
    s.user_create("pw@example.com").await;
    let session = s.login("pw@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.patch(
        "/v1/me",
        &session,
        json!({ "password": "a brand new password" }),
    )
    .await
    .assert_problem(422, "invalid_request");
    // An API token of that user cannot, even with the current password.
    let own_token = token_create(&s, &session, &["write"]).await;
    s.patch(
        "/v1/me",
        &own_token,
        json!({ "password": "a brand new password", "current_password": PASSWORD }),
    )
    .await
    .assert_problem(403, "session_required");
}

async fn a_password_change_ends_every_session(s: TestServer) {
    s.user_create("end@example.com").await;
    let first = s.login("end@example.com").await;
    let second = s.login("end@example.com").await;
    let access = first["access_token"].as_str().unwrap();
    s.patch(
        "/v1/me",
        access,
        json!({ "password": "a brand new password", "current_password": PASSWORD }),
    )
    .await
    .assert_status(200);
    for session in [&first, &second] {
        s.get("/v1/me", session["access_token"].as_str().unwrap())
            .await
            .assert_problem(401, "unauthenticated");
        s.call(
            Method::POST,
            "/v1/auth/refresh",
            None,
            Some(json!({ "refresh_token": session["refresh_token"] })),
        )
        .await
        .assert_problem(401, "unauthenticated");
    }
    let audit = s.get("/v1/audit-events", ADMIN_TOKEN).await;
    let change = audit.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "user.update_self")
        .expect("the change is audited")
        .clone();
    assert_eq!(change["details"]["sessions_ended"], 2);
    // An administrator disabling the user ends its sessions too.
    let fresh = s
        .call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({ "email": "end@example.com", "password": "a brand new password" })),
        )
        .await;
    let fresh = fresh.assert_status(200)["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let id = s.get("/v1/me", &fresh).await.body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.patch(
        &format!("/v1/users/{id}"),
        ADMIN_TOKEN,
        json!({ "disabled": true }),
    )
    .await
    .assert_status(200);
    s.patch(
        &format!("/v1/users/{id}"),
        ADMIN_TOKEN,
        json!({ "disabled": false }),
    )
    .await
    .assert_status(200);
    s.get("/v1/me", &fresh)
        .await
        .assert_problem(401, "unauthenticated");
}

async fn post_with_key(s: &TestServer, path: &str, token: &str, key: &str, body: Value) -> Reply {
    TestServer::send(
        s.request(Method::POST, path, Some(token))
            .header("idempotency-key", key)
            .json(&body),
    )
    .await
}

async fn idempotent_replays_belong_to_one_credential(s: TestServer) {
    // An administrator with a password session, and a read token of the same user.
    s.post(
        "/v1/users",
        ADMIN_TOKEN,
        json!({ "email": "root@example.com", "name": "Root", "password": PASSWORD, "is_admin": true }),
    )
    .await
    .assert_status(201);
    let session = s.login("root@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let read = token_create(&s, &session, &["read"]).await;
    let body = json!({ "name": "ci", "scopes": ["admin"] });
    let first = post_with_key(&s, "/v1/tokens", &session, "k", body.clone()).await;
    let secret = first.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(first.header("cache-control"), Some("no-store"));

    // The reproduced hole: the read token repeats the request and key.
    let stolen = post_with_key(&s, "/v1/tokens", &read, "k", body.clone()).await;
    stolen.assert_problem(403, "insufficient_scope");
    assert!(!stolen.text.contains(&secret));
    assert!(stolen.header("idempotent-replayed").is_none());

    // The same credential still gets its replay.
    let replay = post_with_key(&s, "/v1/tokens", &session, "k", body.clone()).await;
    assert_eq!(replay.assert_status(201)["secret"], secret.as_str());
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("cache-control"), Some("no-store"));

    // Two tokens of the user with the very same scopes (no scope check can tell them apart)
    // and the same key: each gets an answer of its own, not the other's.
    let one = token_create(&s, &session, &["admin"]).await;
    let two = token_create(&s, &session, &["admin"]).await;
    let first = post_with_key(&s, "/v1/tokens", &one, "shared", body.clone()).await;
    let first_secret = first.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = post_with_key(&s, "/v1/tokens", &two, "shared", body).await;
    let second_secret = second.assert_status(201)["secret"].as_str().unwrap();
    assert_ne!(
        second_secret, first_secret,
        "the second token was given the first's token"
    );
    assert!(!second.text.contains(&first_secret));
    assert!(second.header("idempotent-replayed").is_none());
}

async fn a_replay_is_authorized_like_a_fresh_request(s: TestServer) {
    let owner = s.user_with_session("replay-owner@example.com").await;
    let project = s.project_create(&owner, "p").await;
    s.user_create("replay-member@example.com").await;
    s.member_add(&project, "replay-member@example.com", "member")
        .await;
    let member = s.login("replay-member@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/projects/{project}/environments");
    let body = json!({ "name": "staging" });
    post_with_key(&s, &path, &member, "env-1", body.clone())
        .await
        .assert_status(201);
    // Demoted to viewer: the replay is refused as a new request would be.
    let member_id = s.get("/v1/me", &member).await.body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.patch(
        &format!("/v1/projects/{project}/members/{member_id}"),
        &owner,
        json!({ "role": "viewer" }),
    )
    .await
    .assert_status(200);
    let replay = post_with_key(&s, &path, &member, "env-1", body).await;
    replay.assert_problem(403, "forbidden");
}

async fn a_refresh_token_used_twice_at_once_revokes_the_session(s: TestServer) {
    s.user_create("race@example.com").await;
    // Several rounds, so that the two uses really do overlap on some of them.
    for _ in 0..8 {
        let session = s.login("race@example.com").await;
        let refresh = |token: Value| {
            let request = s
                .request(Method::POST, "/v1/auth/refresh", None)
                .json(&json!({ "refresh_token": token }));
            TestServer::send(request)
        };
        let (a, b) = tokio::join!(
            refresh(session["refresh_token"].clone()),
            refresh(session["refresh_token"].clone())
        );
        // Exactly one use wins; the other is reuse, refused.
        let winners: Vec<&Reply> = [&a, &b].into_iter().filter(|r| r.status == 200).collect();
        assert_eq!(
            winners.len(),
            1,
            "one use, and only one, must succeed: {} {}",
            a.text,
            b.text
        );
        let loser = if a.status == 200 { &b } else { &a };
        loser.assert_problem(401, "unauthenticated");
        // Whatever the winner got belongs to a revoked session.
        for winner in winners {
            assert_eq!(winner.header("cache-control"), Some("no-store"));
            s.call(
                Method::POST,
                "/v1/auth/refresh",
                None,
                Some(json!({ "refresh_token": winner.body["refresh_token"] })),
            )
            .await
            .assert_problem(401, "unauthenticated");
        }
    }
}

async fn tokens_minted_by_tokens_die_with_them(s: TestServer) {
    let session = s.user_with_session("lineage@example.com").await;
    let soon = chrono::Utc::now() + chrono::Duration::hours(1);
    let parent = s
        .post(
            "/v1/tokens",
            &session,
            json!({ "name": "parent", "scopes": ["write"], "expires_at": soon }),
        )
        .await;
    let parent_id = parent.assert_status(201)["id"].as_str().unwrap().to_owned();
    let parent = parent.body["secret"].as_str().unwrap().to_owned();
    // Asked to live forever, the child lives as long as its parent.
    let child = s
        .post(
            "/v1/tokens",
            &parent,
            json!({ "name": "child", "scopes": ["write"] }),
        )
        .await;
    let child_expiry = child.assert_status(201)["expires_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let child_expiry: chrono::DateTime<chrono::Utc> = child_expiry.parse().unwrap();
    assert!(
        (child_expiry - soon).num_seconds().abs() <= 1,
        "{child_expiry} vs {soon}"
    );
    let child = child.body["secret"].as_str().unwrap().to_owned();
    let grandchild = token_create(&s, &child, &["read"]).await;
    s.get("/v1/me", &grandchild).await.assert_status(200);
    // Revoking the parent revokes what it minted, at every depth.
    s.delete(&format!("/v1/tokens/{parent_id}"), &session)
        .await
        .assert_status(204);
    for token in [&parent, &child, &grandchild] {
        s.get("/v1/me", token)
            .await
            .assert_problem(401, "unauthenticated");
    }
}

/// A revoked token, a disabled user and a removed member lose access at once on this server,
/// however recently they were used.
async fn credentials_are_not_cached(s: TestServer) {
    let session = s.user_with_session("cache-owner@example.com").await;
    let project = s.project_create(&session, "p").await;
    let token = s
        .post(
            "/v1/tokens",
            &session,
            json!({ "name": "t", "scopes": ["write"] }),
        )
        .await;
    let token_id = token.assert_status(201)["id"].as_str().unwrap().to_owned();
    let token = token.body["secret"].as_str().unwrap().to_owned();
    s.get(&format!("/v1/projects/{project}"), &token)
        .await
        .assert_status(200);
    s.delete(&format!("/v1/tokens/{token_id}"), &session)
        .await
        .assert_status(204);
    s.get(&format!("/v1/projects/{project}"), &token)
        .await
        .assert_problem(401, "unauthenticated");

    s.user_create("cache-member@example.com").await;
    s.member_add(&project, "cache-member@example.com", "member")
        .await;
    let member = s.login("cache-member@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let member_id = s.get("/v1/me", &member).await.body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let member_token = token_create(&s, &member, &["write"]).await;
    s.get(&format!("/v1/projects/{project}"), &member_token)
        .await
        .assert_status(200);
    s.patch(
        &format!("/v1/projects/{project}/members/{member_id}"),
        &session,
        json!({ "role": "viewer" }),
    )
    .await
    .assert_status(200);
    s.post(
        &format!("/v1/projects/{project}/environments"),
        &member_token,
        json!({ "name": "staging" }),
    )
    .await
    .assert_problem(403, "forbidden");
    s.delete(
        &format!("/v1/projects/{project}/members/{member_id}"),
        &session,
    )
    .await
    .assert_status(204);
    s.get(&format!("/v1/projects/{project}"), &member_token)
        .await
        .assert_problem(404, "not_found");
    s.patch(
        &format!("/v1/users/{member_id}"),
        ADMIN_TOKEN,
        json!({ "disabled": true }),
    )
    .await
    .assert_status(200);
    s.get("/v1/me", &member_token)
        .await
        .assert_problem(401, "unauthenticated");
}

/// A client sending logins from one address, for `email` (wrong password).
async fn login_from(s: &TestServer, from: IpAddr, email: &str) -> Reply {
    let client = crate::support::http_builder()
        .local_address(from)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    TestServer::send(
        client
            .post(s.url("/v1/auth/login"))
            .json(&json!({ "email": email, "password": "wrong password, surely" })),
    )
    .await
}

/// A login with the right password from `from`.
async fn login_right_from(s: &TestServer, from: IpAddr, email: &str) -> Reply {
    let request = crate::support::http_builder()
        .local_address(from)
        .build()
        .unwrap()
        .post(s.url("/v1/auth/login"))
        .json(&json!({ "email": email, "password": PASSWORD }));
    TestServer::send(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_are_limited_per_address_and_per_account() {
    let (url, dir) = database_fresh(Backend::Sqlite).await.unwrap();
    let s = TestServer::start_on(Backend::Sqlite, url, dir, |settings| {
        settings.login_limits.per_ip_per_minute = 4;
        settings.login_limits.per_account_per_minute = 3;
    })
    .await;
    s.user_create("target@example.com").await;
    // One address guessing many accounts: the fifth attempt a minute is refused.
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    for n in 0..4 {
        login_from(&s, attacker, &format!("guess{n}@example.com"))
            .await
            .assert_problem(401, "unauthenticated");
    }
    let refused = login_from(&s, attacker, "guess9@example.com").await;
    refused.assert_problem(429, "too_many_attempts");
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    // The owner signs in from their usual address, which the account then knows.
    let usual: IpAddr = "127.0.1.50".parse().unwrap();
    login_right_from(&s, usual, "target@example.com")
        .await
        .assert_status(200);
    // Many addresses guessing one account: past the account's limit (3, one spent by the
    // owner), refused even from a fresh address, and even with the right password.
    for n in 0..2 {
        let from: IpAddr = format!("127.0.1.{}", n + 1).parse().unwrap();
        login_from(&s, from, "target@example.com")
            .await
            .assert_problem(401, "unauthenticated");
    }
    login_from(&s, "127.0.1.9".parse().unwrap(), "target@example.com")
        .await
        .assert_problem(429, "too_many_attempts");
    login_right_from(&s, "127.0.1.10".parse().unwrap(), "target@example.com")
        .await
        .assert_problem(429, "too_many_attempts");
    // The flood does not lock the owner out: their usual address is admitted, limited on its
    // own (3 a minute for the account from there).
    login_right_from(&s, usual, "target@example.com")
        .await
        .assert_status(200);
    login_from(&s, usual, "target@example.com")
        .await
        .assert_problem(401, "unauthenticated");
    login_from(&s, usual, "target@example.com")
        .await
        .assert_problem(429, "too_many_attempts");
    // Other accounts from other addresses are unaffected.
    s.user_create("bystander@example.com").await;
    s.login("bystander@example.com").await;

    // A server restarted in the middle of a flood (as after an outage) still knows the
    // owner's usual address: the database holds it, not the process.
    let s = s
        .restart_with(|settings| {
            settings.login_limits.per_ip_per_minute = 4;
            settings.login_limits.per_account_per_minute = 3;
        })
        .await;
    for n in 0..3 {
        let from: IpAddr = format!("127.0.2.{}", n + 1).parse().unwrap();
        login_from(&s, from, "target@example.com")
            .await
            .assert_problem(401, "unauthenticated");
    }
    login_right_from(&s, "127.0.2.9".parse().unwrap(), "target@example.com")
        .await
        .assert_problem(429, "too_many_attempts");
    login_right_from(&s, usual, "target@example.com")
        .await
        .assert_status(200);
    // The database names no address in clear.
    use sea_orm::EntityTrait;
    let stored = bulkhead::entity::sign_in_address::Entity::find()
        .all(&s.app().db)
        .await
        .unwrap();
    assert!(stored.len() >= 2, "{stored:?}");
    assert!(
        stored
            .iter()
            .all(|row| row.address_hash.len() == 64 && !row.address_hash.contains("127.")),
        "{stored:?}"
    );
}
