//! Identity: password login, refresh rotation and reuse detection, logout, API tokens and
//! their scopes, and attacks on access tokens.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bulkhead::entity::signing_key;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::Method;
use sea_orm::EntityTrait;
use serde_json::{Value, json};

use crate::db_tests;
use crate::support::{ADMIN_TOKEN, PASSWORD, TestServer};

db_tests!(
    login_refresh_logout,
    refresh_token_reuse_revokes_the_session,
    login_refuses_wrong_credentials_and_disabled_users,
    api_tokens_are_shown_once_scoped_and_revocable,
    tokens_cannot_escalate_scopes,
    jwt_attacks_are_refused,
    signing_key_survives_restart,
    me_password_change_requires_current_password,
);

async fn login_refresh_logout(s: TestServer) {
    s.user_create("ana@example.com").await;
    let session = s.login("ana@example.com").await;
    assert_eq!(session["token_type"], "Bearer");
    assert_eq!(session["expires_in"], 900);
    let access = session["access_token"].as_str().unwrap();
    let me = s.get("/v1/me", access).await;
    assert_eq!(me.assert_status(200)["email"], "ana@example.com");
    assert!(me.body["last_login_at"].is_string());
    assert!(me.body.get("password_hash").is_none() && !me.text.contains("argon2"));

    let refreshed = s
        .call(
            Method::POST,
            "/v1/auth/refresh",
            None,
            Some(json!({ "refresh_token": session["refresh_token"] })),
        )
        .await;
    let refreshed = refreshed.assert_status(200).clone();
    assert_ne!(refreshed["refresh_token"], session["refresh_token"]);
    s.get("/v1/me", refreshed["access_token"].as_str().unwrap())
        .await
        .assert_status(200);

    let logout = s
        .call(
            Method::POST,
            "/v1/auth/logout",
            None,
            Some(json!({ "refresh_token": refreshed["refresh_token"] })),
        )
        .await;
    logout.assert_status(204);
    let after = s
        .call(
            Method::POST,
            "/v1/auth/refresh",
            None,
            Some(json!({ "refresh_token": refreshed["refresh_token"] })),
        )
        .await;
    after.assert_problem(401, "unauthenticated");
}

async fn refresh_token_reuse_revokes_the_session(s: TestServer) {
    s.user_create("bo@example.com").await;
    let first = s.login("bo@example.com").await;
    let refresh = |token: &Value| {
        s.call(
            Method::POST,
            "/v1/auth/refresh",
            None,
            Some(json!({ "refresh_token": token })),
        )
    };
    let second = refresh(&first["refresh_token"])
        .await
        .assert_status(200)
        .clone();
    // The first refresh token is replayed (e.g. stolen): refused, and the whole session ends.
    refresh(&first["refresh_token"])
        .await
        .assert_problem(401, "unauthenticated");
    refresh(&second["refresh_token"])
        .await
        .assert_problem(401, "unauthenticated");
    // Another session of the same user is unaffected.
    let other = s.login("bo@example.com").await;
    refresh(&other["refresh_token"]).await.assert_status(200);
}

async fn login_refuses_wrong_credentials_and_disabled_users(s: TestServer) {
    let id = s.user_create("cy@example.com").await;
    let login = |email: &str, password: &str| {
        s.call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({ "email": email, "password": password })),
        )
    };
    let wrong = login("cy@example.com", "not the password at all").await;
    wrong.assert_problem(401, "unauthenticated");
    assert_eq!(wrong.header("www-authenticate"), Some("Bearer"));
    assert!(!wrong.text.contains("not the password"));
    let unknown = login("nobody@example.com", PASSWORD).await;
    assert_eq!(
        unknown.body["detail"], wrong.body["detail"],
        "unknown emails look like wrong passwords"
    );

    let token = s.login("cy@example.com").await["access_token"]
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
    login("cy@example.com", PASSWORD)
        .await
        .assert_problem(401, "unauthenticated");
    s.get("/v1/me", &token)
        .await
        .assert_problem(401, "unauthenticated");
}

async fn api_tokens_are_shown_once_scoped_and_revocable(s: TestServer) {
    let session = s.user_with_session("di@example.com").await;
    let created = s
        .post(
            "/v1/tokens",
            &session,
            json!({ "name": "ci", "scopes": ["read"] }),
        )
        .await;
    let created = created.assert_status(201).clone();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("bh_"));
    let id = created["id"].as_str().unwrap();

    // Never shown again.
    let listed = s.get("/v1/tokens", &session).await;
    assert!(!listed.text.contains(&secret));
    assert_eq!(listed.body["items"][0]["scopes"], json!(["read"]));
    let viewed = s.get(&format!("/v1/tokens/{id}"), &session).await;
    assert!(!viewed.text.contains(&secret));

    // A read token reads but does not write.
    s.get("/v1/projects", &secret).await.assert_status(200);
    s.post("/v1/projects", &secret, json!({ "name": "x" }))
        .await
        .assert_problem(403, "insufficient_scope");
    let used = s.get(&format!("/v1/tokens/{id}"), &session).await;
    assert!(used.body["last_used_at"].is_string());

    s.delete(&format!("/v1/tokens/{id}"), &session)
        .await
        .assert_status(204);
    s.get("/v1/projects", &secret)
        .await
        .assert_problem(401, "unauthenticated");

    // Expired tokens do not work; expiry in the past is refused at creation.
    let past = s
        .post(
            "/v1/tokens",
            &session,
            json!({ "name": "old", "scopes": ["read"], "expires_at": "2020-01-01T00:00:00Z" }),
        )
        .await;
    past.assert_problem(422, "invalid_request");
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let short = s
        .post(
            "/v1/tokens",
            &session,
            json!({ "name": "short", "scopes": ["read"], "expires_at": soon }),
        )
        .await;
    let short = short.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    s.get("/v1/projects", &short).await.assert_status(200);
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    s.get("/v1/projects", &short)
        .await
        .assert_problem(401, "unauthenticated");
}

async fn tokens_cannot_escalate_scopes(s: TestServer) {
    let session = s.user_with_session("ed@example.com").await;
    let write = s
        .post(
            "/v1/tokens",
            &session,
            json!({ "name": "w", "scopes": ["write"] }),
        )
        .await;
    let write = write.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let escalate = s
        .post(
            "/v1/tokens",
            &write,
            json!({ "name": "a", "scopes": ["admin"] }),
        )
        .await;
    escalate.assert_problem(403, "forbidden");
    s.post(
        "/v1/tokens",
        &write,
        json!({ "name": "r", "scopes": ["read"] }),
    )
    .await
    .assert_status(201);
    s.post(
        "/v1/tokens",
        &session,
        json!({ "name": "none", "scopes": [] }),
    )
    .await
    .assert_problem(422, "invalid_request");
    s.post(
        "/v1/tokens",
        &session,
        json!({ "name": "bad", "scopes": ["root"] }),
    )
    .await
    .assert_problem(422, "invalid_body");
    // A non-administrator's admin-scoped token grants no administration.
    let admin_scoped = s
        .post(
            "/v1/tokens",
            &session,
            json!({ "name": "a", "scopes": ["admin"] }),
        )
        .await;
    let admin_scoped = admin_scoped.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    s.get("/v1/users", &admin_scoped)
        .await
        .assert_problem(403, "forbidden");
}

fn b64(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap())
}

async fn jwt_attacks_are_refused(s: TestServer) {
    let user_id = s.user_create("fa@example.com").await;
    let valid = s.login("fa@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.get("/v1/me", &valid).await.assert_status(200);
    let key = signing_key::Entity::find()
        .one(&s.app().db)
        .await
        .unwrap()
        .unwrap();
    let now = chrono::Utc::now().timestamp();
    let claims = |iss: &str, aud: &str, nbf: i64, exp: i64| json!({ "iss": iss, "aud": aud, "sub": user_id, "iat": now, "nbf": nbf, "exp": exp, "jti": uuid::Uuid::new_v4(), "sid": uuid::Uuid::new_v4() });
    let sign = |claims: &Value| {
        let private_pem = bulkhead::auth::signing_key_private_pem(&s.app().secrets, &key).unwrap();
        let encoding = EncodingKey::from_ed_pem(private_pem.as_bytes()).unwrap();
        jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), claims, &encoding).unwrap()
    };
    // Control: a token signed by the server's key with good claims works, so the refusals
    // below are about the claim or algorithm under test.
    s.get(
        "/v1/me",
        &sign(&claims("bulkhead", "bulkhead-api", now, now + 60)),
    )
    .await
    .assert_status(200);

    let mut without_session = claims("bulkhead", "bulkhead-api", now, now + 60);
    without_session.as_object_mut().unwrap().remove("sid");
    let mut attacks: Vec<(&str, String)> = vec![
        // From before session ids: it would share one idempotency namespace with all such.
        ("no session id", sign(&without_session)),
        (
            "expired",
            sign(&claims("bulkhead", "bulkhead-api", now - 600, now - 300)),
        ),
        (
            "not yet valid",
            sign(&claims("bulkhead", "bulkhead-api", now + 600, now + 900)),
        ),
        (
            "wrong audience",
            sign(&claims("bulkhead", "someone-else", now, now + 60)),
        ),
        (
            "wrong issuer",
            sign(&claims("evil", "bulkhead-api", now, now + 60)),
        ),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(&json!({"alg": "none", "typ": "JWT"})),
                b64(&claims("bulkhead", "bulkhead-api", now, now + 60))
            ),
        ),
        (
            "HS256 keyed with the public key",
            jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &claims("bulkhead", "bulkhead-api", now, now + 60),
                &EncodingKey::from_secret(key.public_key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        ),
    ];
    let parts: Vec<&str> = valid.split('.').collect();
    let tampered = claims("bulkhead", "bulkhead-api", now, now + 86_400);
    attacks.push((
        "tampered payload",
        format!("{}.{}.{}", parts[0], b64(&tampered), parts[2]),
    ));
    attacks.push(("missing signature", format!("{}.{}.", parts[0], parts[1])));
    let mut missing_exp = claims("bulkhead", "bulkhead-api", now, now + 60);
    missing_exp.as_object_mut().unwrap().remove("exp");
    attacks.push(("no expiry", sign(&missing_exp)));
    for (name, token) in attacks {
        let reply = s.get("/v1/me", &token).await;
        assert_eq!(reply.status, 401, "{name} was accepted: {}", reply.text);
        reply.assert_problem(401, "unauthenticated");
    }
    let no_scheme = s
        .request(Method::GET, "/v1/me", None)
        .header("authorization", valid.clone());
    TestServer::send(no_scheme)
        .await
        .assert_problem(401, "unauthenticated");
}

async fn signing_key_survives_restart(s: TestServer) {
    s.user_create("gu@example.com").await;
    let token = s.login("gu@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let s = s.restart().await;
    s.get("/v1/me", &token).await.assert_status(200);
}

async fn me_password_change_requires_current_password(s: TestServer) {
    s.user_create("ha@example.com").await;
    let token = s.login("ha@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let wrong = s
        .patch(
            "/v1/me",
            &token,
            json!({ "password": "a brand new password", "current_password": "nope" }),
        )
        .await;
    wrong.assert_problem(403, "forbidden");
    let short = s
        .patch(
            "/v1/me",
            &token,
            json!({ "password": "short", "current_password": PASSWORD }),
        )
        .await;
    short.assert_problem(422, "invalid_request");
    let ok = s.patch("/v1/me", &token, json!({ "password": "a brand new password", "current_password": PASSWORD, "name": "Ha" })).await;
    assert_eq!(ok.assert_status(200)["name"], "Ha");
    let login = s
        .call(
            Method::POST,
            "/v1/auth/login",
            None,
            Some(json!({ "email": "ha@example.com", "password": "a brand new password" })),
        )
        .await;
    login.assert_status(200);
}
