//! Signing in with an outside identity provider (GitHub's OAuth, played by the forge
//! simulator, with PKCE): linking an account from a session, signing in with it, a state
//! used once, an account linked to one user only, API tokens refused; a slow provider called
//! at most `IN_FLIGHT_MAX` at a time by a crowd; and a provider that rate-limits or fails:
//! new sign-ins get 503 with `Retry-After` without reaching it while it
//! is held, sessions made before keep refreshing, and sign-ins work again once it answers.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use bulkhead::app::identity::sign_in::calls::IN_FLIGHT_MAX;
use bulkhead::config::{SignInProvider, SignInProviderKind};
use bulkhead_simulators::RunningSimulator;
use bulkhead_simulators::faults::FaultState;
use bulkhead_simulators::forge::{ForgeAccount, ForgeSimulator};

use crate::backend_tests;
use crate::support::{Backend, TestServer, database_fresh};

backend_tests!(accounts_link_and_sign_in_while_the_provider_allows);

/// What the provider sent back: `code` and `state`, taken from its redirect.
async fn authorize(start: &Value, login: &str) -> (String, String) {
    let url = format!("{}&login={login}", start["authorize_url"].as_str().unwrap());
    let http = crate::support::http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let answer = http.get(url).send().await.unwrap();
    assert_eq!(answer.status(), 302);
    let location = reqwest::Url::parse(answer.headers()["location"].to_str().unwrap()).unwrap();
    let param = |name: &str| {
        location
            .query_pairs()
            .find(|(key, _)| key == name)
            .unwrap()
            .1
            .into_owned()
    };
    assert_eq!(location.path(), "/dashboard/callback");
    (param("code"), param("state"))
}

async fn accounts_link_and_sign_in_while_the_provider_allows(backend: Backend) {
    let Some((database_url, dir)) = database_fresh(backend).await else {
        return;
    };
    let forge = ForgeSimulator::new("unused");
    forge.oauth_app_set(
        "bulkhead-client",
        "client-secret",
        vec![
            ForgeAccount {
                id: 1001,
                login: "octo".into(),
            },
            ForgeAccount {
                id: 1002,
                login: "cat".into(),
            },
        ],
    );
    let simulator = RunningSimulator::serve("127.0.0.1:0".parse().unwrap(), forge.router())
        .await
        .unwrap();
    let base = simulator.url();
    let s = TestServer::start_on(backend, database_url, dir, |settings| {
        // This test starts more sign-ins from one address than a minute allows by default.
        settings.login_limits.per_ip_per_minute = 1000;
        settings.sign_in_providers = vec![SignInProvider {
            name: "github".into(),
            kind: SignInProviderKind::Github,
            issuer: None,
            token_endpoint_auth_method: None,
            authorize_url: Some(format!("{base}/login/oauth/authorize")),
            token_url: Some(format!("{base}/login/oauth/access_token")),
            userinfo_url: Some(format!("{base}/user")),
            client_id: "bulkhead-client".into(),
            client_secret: "client-secret".into(),
            redirect_uri: "http://127.0.0.1:1/dashboard/callback".into(),
            scopes: vec!["read:user".into()],
        }];
    })
    .await;
    let providers = s.call(Method::GET, "/v1/auth/providers", None, None).await;
    assert_eq!(
        providers.assert_status(200),
        &json!([{ "name": "github", "kind": "github" }])
    );
    let start = async || {
        s.call(Method::POST, "/v1/auth/providers/github/start", None, None)
            .await
    };
    let finish = async |code: &str, state: &str| {
        s.call(
            Method::POST,
            "/v1/auth/providers/github/finish",
            None,
            Some(json!({ "code": code, "state": state })),
        )
        .await
    };
    s.call(Method::POST, "/v1/auth/providers/gitlab/start", None, None)
        .await
        .assert_problem(404, "not_found");

    // Nobody linked octo yet: refused, and said how to link.
    let started = start().await;
    let (code, state) = authorize(started.assert_status(200), "octo").await;
    assert!(
        started.body["authorize_url"]
            .as_str()
            .unwrap()
            .contains("code_challenge_method=S256")
    );
    finish(&code, &state)
        .await
        .assert_problem(403, "identity_not_linked");

    // Alice links octo from her session; an API token may not.
    let alice = s.user_with_session("alice@example.com").await;
    let token = s
        .post(
            "/v1/tokens",
            &alice,
            json!({ "name": "ci", "scopes": ["read", "write"] }),
        )
        .await;
    let token = token.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    s.call(
        Method::POST,
        "/v1/me/identities/github/start",
        Some(&token),
        None,
    )
    .await
    .assert_problem(403, "session_required");
    let link = s
        .call(
            Method::POST,
            "/v1/me/identities/github/start",
            Some(&alice),
            None,
        )
        .await;
    let (code, state) = authorize(link.assert_status(200), "octo").await;
    let linked = s
        .call(
            Method::POST,
            "/v1/me/identities/github/finish",
            Some(&alice),
            Some(json!({ "code": code, "state": state })),
        )
        .await;
    let linked = linked.assert_status(201).clone();
    assert_eq!(linked["subject"], "1001");
    assert_eq!(linked["login"], "octo");
    // Bob cannot link the same account.
    let bob = s.user_with_session("bob@example.com").await;
    let link = s
        .call(
            Method::POST,
            "/v1/me/identities/github/start",
            Some(&bob),
            None,
        )
        .await;
    let (code, state) = authorize(link.assert_status(200), "octo").await;
    s.call(
        Method::POST,
        "/v1/me/identities/github/finish",
        Some(&bob),
        Some(json!({ "code": code, "state": state })),
    )
    .await
    .assert_problem(409, "identity_taken");

    // Signing in with octo is Alice; the same state again is refused.
    let started = start().await;
    let (code, state) = authorize(started.assert_status(200), "octo").await;
    let session = finish(&code, &state).await;
    let session = session.assert_status(200).clone();
    let access = session["access_token"].as_str().unwrap().to_owned();
    let me = s.get("/v1/me", &access).await;
    assert_eq!(me.assert_status(200)["email"], "alice@example.com");
    finish(&code, &state)
        .await
        .assert_problem(400, "sign_in_failed");
    let identities = s.get("/v1/me/identities", &alice).await;
    assert!(identities.assert_status(200)[0]["last_used_at"].is_string());

    // A slow provider and a crowd finishing at once: this server calls it a few at a time,
    // and every sign-in finishes.
    let mut pairs = Vec::new();
    for _ in 0..8 {
        let started = start().await;
        pairs.push(authorize(started.assert_status(200), "octo").await);
    }
    forge.faults.set(FaultState {
        latency_ms: 200,
        ..Default::default()
    });
    let crowd =
        futures::future::join_all(pairs.iter().map(|(code, state)| finish(code, state))).await;
    for session in &crowd {
        session.assert_status(200);
    }
    let most = forge.stats().oauth_in_flight_max;
    assert!(
        (2..=IN_FLIGHT_MAX as u64).contains(&most),
        "{most} calls at once"
    );
    forge.faults.set(FaultState::default());

    // The provider limits us (429, Retry-After: 2): 503 with Retry-After, and until the wait
    // is over no sign-in reaches it; the sessions made before keep refreshing.
    forge.faults.set(FaultState {
        rate_limited_secs: Some(2),
        ..Default::default()
    });
    let started = start().await;
    let (code, state) = authorize(started.assert_status(200), "octo").await;
    let refused = finish(&code, &state).await;
    refused.assert_problem(503, "sign_in_unavailable");
    assert!(refused.header("retry-after").is_some());
    let calls = forge.oauth_calls();
    for _ in 0..5 {
        let held = start().await;
        held.assert_problem(503, "sign_in_unavailable");
        let wait: u64 = held.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=2).contains(&wait), "{wait}");
    }
    assert_eq!(
        forge.oauth_calls(),
        calls,
        "nothing reached the provider while held"
    );
    let refreshed = s
        .call(
            Method::POST,
            "/v1/auth/refresh",
            None,
            Some(json!({ "refresh_token": session["refresh_token"] })),
        )
        .await;
    refreshed.assert_status(200);

    // The hold is over and the provider still limits us: a crowd finishing at once sends it
    // one call, which is limited again; the others are refused without using their state.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let mut pairs = Vec::new();
    for _ in 0..5 {
        let started = start().await;
        pairs.push(authorize(started.assert_status(200), "octo").await);
    }
    let calls = forge.oauth_calls();
    let crowd =
        futures::future::join_all(pairs.iter().map(|(code, state)| finish(code, state))).await;
    for refused in &crowd {
        refused.assert_problem(503, "sign_in_unavailable");
        assert!(refused.header("retry-after").is_some());
    }
    assert_eq!(forge.oauth_calls(), calls + 1, "one call found out");
    assert_eq!(forge.stats().oauth_limited, 2);
    assert_eq!(forge.stats().oauth_during_hold, 0);
    // Once it answers, those refused before reaching it finish with the same code and state.
    forge.faults.set(FaultState::default());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let mut finished = 0;
    for (code, state) in &pairs {
        let again = finish(code, state).await;
        match again.status {
            200 => finished += 1,
            _ => again.assert_problem(400, "sign_in_failed"),
        };
    }
    assert_eq!(finished, 4, "all but the one that reached the provider");

    // A failing provider (502) is held too.
    forge.faults.set(FaultState {
        failing: true,
        ..Default::default()
    });
    let started = start().await;
    let (code, state) = authorize(started.assert_status(200), "octo").await;
    finish(&code, &state)
        .await
        .assert_problem(503, "sign_in_unavailable");
    start().await.assert_problem(503, "sign_in_unavailable");

    // Unlinking: the account no longer signs Alice in.
    let id = linked["id"].as_str().unwrap();
    s.delete(&format!("/v1/me/identities/{id}"), &bob)
        .await
        .assert_problem(404, "not_found");
    s.delete(&format!("/v1/me/identities/{id}"), &alice)
        .await
        .assert_status(204);
    assert_eq!(s.get("/v1/me/identities", &alice).await.body, json!([]));
    simulator.shutdown().await.unwrap();
}
