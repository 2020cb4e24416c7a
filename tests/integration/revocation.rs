//! Revocation takes effect everywhere, at once: an open event stream ends within a second of
//! its credential's revocation (a token revoked, a logout, a user demoted, a membership
//! removed); a logged-out session's access tokens are refused at the next request; a session
//! caught reusing a refresh token loses the API tokens it minted; and a token minted at the
//! moment its parent is revoked dies with it.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::db_tests;
use crate::deployments::{deploy, fixture};
use crate::routing::routing_token;
use crate::support::{ADMIN_TOKEN, TestServer, platform};

db_tests!(
    a_revoked_token_ends_its_routing_watch_within_a_second,
    a_demoted_administrator_s_routing_watch_ends,
    a_deployment_stream_ends_when_its_reader_loses_access,
    logout_refuses_the_session_s_access_tokens_at_once,
    a_reused_refresh_token_revokes_what_the_session_minted,
    a_token_minted_while_its_parent_is_revoked_dies_with_it,
    a_token_minted_while_its_session_is_caught_dies_with_it,
);

/// How long a revocation may take to end a stream.
const WITHIN: Duration = Duration::from_secs(1);

/// Opens an event stream at `path` as `token` and reads until its first event arrives.
pub async fn stream_open(s: &TestServer, path: &str, token: &str) -> reqwest::Response {
    let mut response = s
        .http
        .get(s.url(path))
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let mut seen = String::new();
    while !seen.contains("\nid:") && !seen.starts_with("id:") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), response.chunk())
            .await
            .expect("a first event")
            .unwrap()
            .expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    response
}

/// Reads the stream for `within`, and says when it ended (`None`: it did not).
async fn ends_within(mut response: reqwest::Response, within: Duration) -> Option<Instant> {
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), response.chunk()).await {
            Err(_) => return None,
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None)) | Ok(Err(_)) => return Some(Instant::now()),
        }
    }
}

/// Asserts that the stream goes on for a while (it would end with any change, not only the
/// one that ends it), then that it ends within [`WITHIN`] of `revoke`'s answer (the
/// revocation is committed by then; the time the request itself takes on a loaded machine
/// is not the stream's).
pub async fn ended_by(response: reqwest::Response, revoke: impl AsyncFnOnce(), what: &str) {
    let (response, quiet) = {
        let mut response = response;
        let quiet = tokio::time::timeout(Duration::from_millis(1500), async {
            while let Ok(Some(_)) = response.chunk().await {}
        })
        .await
        .is_err();
        (response, quiet)
    };
    assert!(
        quiet,
        "{what}: the stream ended before anything was revoked"
    );
    let ending = tokio::spawn(ends_within(response, WITHIN + Duration::from_secs(30)));
    revoke().await;
    let revoked = Instant::now();
    let ended = ending
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: the stream still goes on"));
    let after = ended.saturating_duration_since(revoked);
    assert!(
        after <= WITHIN,
        "{what}: the stream ended {after:?} after the revocation (aim {WITHIN:?})"
    );
}

/// A new token made with `credential`: its id and its secret.
async fn token_made(
    s: &TestServer,
    credential: &str,
    name: &str,
    scopes: &[&str],
) -> (String, String) {
    let made = s
        .post(
            "/v1/tokens",
            credential,
            json!({ "name": name, "scopes": scopes }),
        )
        .await;
    let body = made.assert_status(201);
    (
        body["id"].as_str().unwrap().to_owned(),
        body["secret"].as_str().unwrap().to_owned(),
    )
}

async fn a_revoked_token_ends_its_routing_watch_within_a_second(s: TestServer) {
    // Made by an administrator's session, so that nothing else it could revoke covers it.
    s.user_create("edge-admin@example.com").await;
    let user = s
        .get("/v1/users?limit=200", ADMIN_TOKEN)
        .await
        .assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == "edge-admin@example.com")
        .map(|u| u["id"].as_str().unwrap().to_owned())
        .unwrap();
    s.patch(
        &format!("/v1/users/{user}"),
        ADMIN_TOKEN,
        json!({ "is_admin": true }),
    )
    .await
    .assert_status(200);
    let session = s.login("edge-admin@example.com").await;
    let session = session["access_token"].as_str().unwrap();
    let (id, token) = token_made(&s, session, "edge", &["routing:read"]).await;
    let other_watch = stream_open(&s, "/v1/routing-table/watch", &routing_token(&s).await).await;
    let watch = stream_open(&s, "/v1/routing-table/watch", &token).await;
    ended_by(
        watch,
        async || {
            s.delete(&format!("/v1/tokens/{id}"), session)
                .await
                .assert_status(204);
        },
        "a revoked routing:read token",
    )
    .await;
    // Only the revoked token's stream ended.
    assert!(
        ends_within(other_watch, Duration::from_millis(500))
            .await
            .is_none(),
        "another token's watch ended too"
    );
    // And it cannot open another.
    TestServer::send(
        s.request(Method::GET, "/v1/routing-table/watch", Some(&token))
            .header("accept", "text/event-stream"),
    )
    .await
    .assert_problem(401, "unauthenticated");
}

async fn a_demoted_administrator_s_routing_watch_ends(s: TestServer) {
    let user = s.user_create("edge-operator@example.com").await;
    s.patch(
        &format!("/v1/users/{user}"),
        ADMIN_TOKEN,
        json!({ "is_admin": true }),
    )
    .await
    .assert_status(200);
    let session = s.login("edge-operator@example.com").await;
    let access = session["access_token"].as_str().unwrap();
    let token = s
        .post(
            "/v1/tokens",
            access,
            json!({ "name": "edge", "scopes": ["routing:read"] }),
        )
        .await;
    let token = token.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch = stream_open(&s, "/v1/routing-table/watch", &token).await;
    ended_by(
        watch,
        async || {
            s.patch(
                &format!("/v1/users/{user}"),
                ADMIN_TOKEN,
                json!({ "is_admin": false }),
            )
            .await
            .assert_status(200);
        },
        "a demoted administrator's token",
    )
    .await;
    TestServer::send(
        s.request(Method::GET, "/v1/routing-table/watch", Some(&token))
            .header("accept", "text/event-stream"),
    )
    .await
    .assert_problem(403, "forbidden");
}

/// A deployment that stays queued (the pipeline is paused), so that its stream stays open.
async fn deployment_held(s: &TestServer) -> (crate::deployments::Fixture, String) {
    s.post(
        "/v1/deploy-pipeline/pause",
        ADMIN_TOKEN,
        json!({ "reason": "holding a deployment open" }),
    )
    .await
    .assert_status(200);
    let f = fixture(s, 1, &["metal"]).await;
    let made = deploy(s, &f.owner, &f.service).await;
    let events = format!(
        "{}/deployments/{}/events",
        f.service,
        made["id"].as_str().unwrap()
    );
    (f, events)
}

async fn a_deployment_stream_ends_when_its_reader_loses_access(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let (f, events) = deployment_held(&s).await;

    // A viewer removed from the project.
    s.user_create("viewer@example.com").await;
    s.member_add(&f.project, "viewer@example.com", "viewer")
        .await;
    let viewer = s.login("viewer@example.com").await;
    let viewer_access = viewer["access_token"].as_str().unwrap();
    let viewer_id = s.get("/v1/me", viewer_access).await.assert_status(200)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let stream = stream_open(&s, &events, viewer_access).await;
    ended_by(
        stream,
        async || {
            s.delete(
                &format!("/v1/projects/{}/members/{viewer_id}", f.project),
                &f.owner,
            )
            .await
            .assert_status(204);
        },
        "a removed member",
    )
    .await;
    s.get(&events, viewer_access)
        .await
        .assert_problem(404, "not_found");

    // A session that logs out.
    s.user_create("second-viewer@example.com").await;
    s.member_add(&f.project, "second-viewer@example.com", "viewer")
        .await;
    let session = s.login("second-viewer@example.com").await;
    let access = session["access_token"].as_str().unwrap();
    let stream = stream_open(&s, &events, access).await;
    ended_by(
        stream,
        async || {
            s.call(
                Method::POST,
                "/v1/auth/logout",
                None,
                Some(json!({ "refresh_token": session["refresh_token"] })),
            )
            .await
            .assert_status(204);
        },
        "a logged-out session",
    )
    .await;

    // A disabled user's API token.
    s.user_create("third-viewer@example.com").await;
    s.member_add(&f.project, "third-viewer@example.com", "viewer")
        .await;
    let third = s.login("third-viewer@example.com").await;
    let third_access = third["access_token"].as_str().unwrap();
    let third_id = s.get("/v1/me", third_access).await.assert_status(200)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = s
        .post(
            "/v1/tokens",
            third_access,
            json!({ "name": "reader", "scopes": ["read"] }),
        )
        .await;
    let token = token.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let stream = stream_open(&s, &events, &token).await;
    ended_by(
        stream,
        async || {
            s.patch(
                &format!("/v1/users/{third_id}"),
                ADMIN_TOKEN,
                json!({ "disabled": true }),
            )
            .await
            .assert_status(200);
        },
        "a disabled user's token",
    )
    .await;
}

async fn logout_refuses_the_session_s_access_tokens_at_once(s: TestServer) {
    s.user_create("leaving@example.com").await;
    let session = s.login("leaving@example.com").await;
    let access = session["access_token"].as_str().unwrap();
    // Used once, so that a cached authentication would answer the next request.
    s.get("/v1/me", access).await.assert_status(200);
    let other = s.login("leaving@example.com").await;
    s.call(
        Method::POST,
        "/v1/auth/logout",
        None,
        Some(json!({ "refresh_token": session["refresh_token"] })),
    )
    .await
    .assert_status(204);
    s.get("/v1/me", access)
        .await
        .assert_problem(401, "unauthenticated");
    s.post("/v1/projects", access, json!({ "name": "after-logout" }))
        .await
        .assert_problem(401, "unauthenticated");
    // The user's other session goes on.
    s.get("/v1/me", other["access_token"].as_str().unwrap())
        .await
        .assert_status(200);
}

async fn mint(s: &TestServer, credential: &str, name: &str) -> String {
    let made = s
        .post(
            "/v1/tokens",
            credential,
            json!({ "name": name, "scopes": ["admin"] }),
        )
        .await;
    made.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn refresh(s: &TestServer, refresh_token: &Value) -> crate::support::Reply {
    s.call(
        Method::POST,
        "/v1/auth/refresh",
        None,
        Some(json!({ "refresh_token": refresh_token })),
    )
    .await
}

async fn a_reused_refresh_token_revokes_what_the_session_minted(s: TestServer) {
    let user = s.user_create("victim@example.com").await;
    s.patch(
        &format!("/v1/users/{user}"),
        ADMIN_TOKEN,
        json!({ "is_admin": true }),
    )
    .await
    .assert_status(200);
    let victim = s.login("victim@example.com").await;
    // The attacker refreshes with a stolen refresh token and mints an admin token, which
    // mints another.
    let stolen = refresh(&s, &victim["refresh_token"]).await;
    let attacker = stolen.assert_status(200).clone();
    let attacker_access = attacker["access_token"].as_str().unwrap();
    let minted = mint(&s, attacker_access, "persistence").await;
    let grandchild = mint(&s, &minted, "more persistence").await;
    // A token the user made in another session, and one the victim's access token made.
    let elsewhere = s.login("victim@example.com").await;
    let kept = mint(&s, elsewhere["access_token"].as_str().unwrap(), "ci").await;
    for credential in [attacker_access, minted.as_str(), grandchild.as_str()] {
        s.get("/v1/me", credential).await.assert_status(200);
    }
    // The victim's client refreshes with the same token: reuse, the session is revoked.
    refresh(&s, &victim["refresh_token"])
        .await
        .assert_problem(401, "unauthenticated");
    for (credential, what) in [
        (
            victim["access_token"].as_str().unwrap(),
            "the victim's access token",
        ),
        (attacker_access, "the attacker's access token"),
        (minted.as_str(), "the token the attacker minted"),
        (grandchild.as_str(), "the token that token minted"),
    ] {
        let reply = s.get("/v1/me", credential).await;
        assert_eq!(reply.status, 401, "{what} still works: {}", reply.text);
    }
    refresh(&s, &attacker["refresh_token"])
        .await
        .assert_problem(401, "unauthenticated");
    // What the user's other session made is not the stolen session's.
    s.get("/v1/me", &kept).await.assert_status(200);
    s.get("/v1/me", elsewhere["access_token"].as_str().unwrap())
        .await
        .assert_status(200);
}

/// Mints four `read` tokens with `credential` while `revocation` runs: each mint fails with
/// 401, or makes a token that is refused once the revocation is done.
async fn mints_during_die_with_it(
    s: &TestServer,
    credential: &str,
    revocation: impl std::future::Future<Output = ()>,
    what: &str,
) {
    let minting = (0..4).map(|n| async move {
        let made = s
            .post(
                "/v1/tokens",
                credential,
                json!({ "name": format!("child-{n}-{}", uuid::Uuid::new_v4().simple()), "scopes": ["read"] }),
            )
            .await;
        match made.status {
            201 => Some(made.body["secret"].as_str().unwrap().to_owned()),
            _ => {
                made.assert_problem(401, "unauthenticated");
                None
            }
        }
    });
    let (children, ()) = tokio::join!(futures::future::join_all(minting), revocation);
    for child in children.into_iter().flatten() {
        let reply = s.get("/v1/me", &child).await;
        assert_eq!(
            reply.status, 401,
            "{what}: a token minted meanwhile outlived it"
        );
    }
}

async fn a_token_minted_while_its_parent_is_revoked_dies_with_it(s: TestServer) {
    let s = &s;
    for round in 0..15 {
        let (parent_id, parent) =
            token_made(s, ADMIN_TOKEN, &format!("parent-{round}"), &["admin"]).await;
        let revoking = async {
            s.delete(&format!("/v1/tokens/{parent_id}"), ADMIN_TOKEN)
                .await
                .assert_status(204);
        };
        mints_during_die_with_it(
            s,
            &parent,
            revoking,
            &format!("round {round}: the parent was revoked"),
        )
        .await;
    }
}

/// The same race for a session: tokens minted by a session at the moment its refresh token's
/// reuse is detected are revoked with it, or not made.
async fn a_token_minted_while_its_session_is_caught_dies_with_it(s: TestServer) {
    let s = &s;
    s.user_create("raced@example.com").await;
    for round in 0..10 {
        let session = s.login("raced@example.com").await;
        // Refreshed once: presenting the first refresh token again is a reuse.
        refresh(s, &session["refresh_token"])
            .await
            .assert_status(200);
        let reusing = async {
            refresh(s, &session["refresh_token"])
                .await
                .assert_problem(401, "unauthenticated");
        };
        mints_during_die_with_it(
            s,
            session["access_token"].as_str().unwrap(),
            reusing,
            &format!("round {round}: the session was caught"),
        )
        .await;
    }
}
