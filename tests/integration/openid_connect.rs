//! Signing in through a real OpenID Provider: panva's certified `oidc-provider` (npm), run by
//! Node from `tests/oidc-provider`. Bulkhead finds it by discovery from its issuer, links and
//! signs in accounts with `client_secret_basic` and `client_secret_post`, and refuses every
//! answer a client must refuse — a tampered, foreign, expired, unsigned or missing ID token,
//! one made for another client, issuer or sign-in, a userinfo answer for another account, an
//! authorization response from another issuer (RFC 9207) — then follows a key rotation at the
//! provider without a restart.

use std::process::Stdio;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use bulkhead::app::identity::sign_in::oidc::JWKS_REFETCH_COOLDOWN;
use bulkhead::config::{SignInProvider, SignInProviderKind, TokenEndpointAuthMethod};

use crate::backend_tests;
use crate::node::{self, Node};
use crate::support::{Backend, Reply, TestServer, database_fresh};

backend_tests!(sign_in_by_discovery_refuses_what_the_provider_must_not_send);

/// The test provider's package.
pub const PROVIDER_PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/oidc-provider");

/// Where the provider sends the browser back in these tests (never visited).
const REDIRECT_URI: &str = "http://127.0.0.1:1/dashboard/callback";

/// A running `oidc-provider`, stopped when dropped.
pub struct OpenIdProvider {
    _child: tokio::process::Child,
    pub issuer: String,
    http: reqwest::Client,
}

impl OpenIdProvider {
    /// Starts the provider with `clients` (`client_id`, `client_secret`, `redirect_uris`,
    /// `token_endpoint_auth_method` each).
    pub async fn start(clients: Value) -> Self {
        let node = tokio::task::spawn_blocking(|| {
            let node = Node::find();
            let version = node::run(std::process::Command::new(&node.node).arg("--version"), "node --version");
            let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
            let (major, minor) = version
                .trim_start_matches('v')
                .split_once('.')
                .map(|(major, rest)| (major.parse().unwrap_or(0), rest.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0)))
                .unwrap_or((0u32, 0u32));
            assert!(
                (major, minor) >= (20, 19),
                "the OpenID Provider (oidc-provider 9) needs Node.js 20.19 or later, and `node` is {version}: {}",
                node::INSTALL_HINT
            );
            node.install(PROVIDER_PACKAGE);
            node
        })
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
        let mut child = tokio::process::Command::new(&node.node)
            .arg("provider.mjs")
            .current_dir(PROVIDER_PACKAGE)
            .env("CLIENTS", clients.to_string())
            .env("PORT", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "node provider.mjs does not start: {err}: {}",
                    node::INSTALL_HINT
                )
            });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let issuer = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(issuer) = line.strip_prefix("listening ") {
                    return issuer.to_owned();
                }
            }
            panic!("the OpenID Provider stopped before listening")
        })
        .await
        .expect("the OpenID Provider listens within 30 s");
        // What it says later goes on being read: a closed pipe would end it at its next line.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("oidc-provider: {line}");
            }
        });
        Self {
            _child: child,
            issuer,
            http: crate::support::http_builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        }
    }

    /// Makes the token (or userinfo) endpoint answer as `mode` says (`off`: as it should).
    pub async fn tamper(&self, mode: &str) {
        let answer = self
            .http
            .post(format!("{}/test/tamper?mode={mode}", self.issuer))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 204);
    }

    /// Replaces the provider's signing key; the new key's id.
    pub async fn rotate(&self) -> String {
        let answer: Value = self
            .http
            .post(format!("{}/test/rotate", self.issuer))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["kid"].as_str().unwrap().to_owned()
    }

    /// Follows the provider's pages from `authorize_url` as `login` (a fresh browser: no
    /// session at the provider) to the redirect back: its `code`, `state` and `iss`.
    pub async fn authorize(&self, authorize_url: &str, login: &str) -> (String, String, String) {
        let mut url = format!("{authorize_url}&login_hint={login}");
        let mut cookies: Vec<String> = Vec::new();
        for _ in 0..10 {
            let mut request = self.http.get(&url);
            if !cookies.is_empty() {
                request = request.header("cookie", cookies.join("; "));
            }
            let answer = request.send().await.unwrap();
            for set in answer.headers().get_all("set-cookie") {
                let pair = set.to_str().unwrap().split(';').next().unwrap().to_owned();
                let name = pair.split('=').next().unwrap().to_owned();
                cookies.retain(|kept| !kept.starts_with(&format!("{name}=")));
                cookies.push(pair);
            }
            assert!(
                answer.status().is_redirection(),
                "{url} answered {}: {}",
                answer.status(),
                answer.text().await.unwrap_or_default()
            );
            let location = answer.headers()["location"].to_str().unwrap();
            let next = reqwest::Url::parse(&self.issuer)
                .unwrap()
                .join(location)
                .unwrap();
            if next.as_str().starts_with(REDIRECT_URI) {
                let param = |name: &str| {
                    next.query_pairs()
                        .find(|(key, _)| key == name)
                        .unwrap_or_else(|| panic!("no {name} in {next}"))
                        .1
                        .into_owned()
                };
                return (param("code"), param("state"), param("iss"));
            }
            url = next.to_string();
        }
        panic!("the provider did not send the browser back within 10 pages")
    }
}

fn provider(
    name: &str,
    issuer: &str,
    client_id: &str,
    method: Option<TokenEndpointAuthMethod>,
) -> SignInProvider {
    SignInProvider {
        name: name.into(),
        kind: SignInProviderKind::Oidc,
        issuer: Some(issuer.into()),
        token_endpoint_auth_method: method,
        authorize_url: None,
        token_url: None,
        userinfo_url: None,
        client_id: client_id.into(),
        client_secret: format!("{client_id}-secret-of-32-characters-at-least"),
        redirect_uri: REDIRECT_URI.into(),
        scopes: Vec::new(),
    }
}

async fn sign_in_by_discovery_refuses_what_the_provider_must_not_send(backend: Backend) {
    let Some((database_url, dir)) = database_fresh(backend).await else {
        return;
    };
    let client = |id: &str, method: &str| {
        json!({
            "client_id": id,
            "client_secret": format!("{id}-secret-of-32-characters-at-least"),
            "redirect_uris": [REDIRECT_URI],
            "token_endpoint_auth_method": method,
        })
    };
    let op = OpenIdProvider::start(json!([
        client("bulkhead-basic", "client_secret_basic"),
        client("bulkhead-post", "client_secret_post"),
    ]))
    .await;
    let issuer = op.issuer.clone();
    let s = TestServer::start_on(backend, database_url, dir, |settings| {
        settings.login_limits.per_ip_per_minute = 1000;
        settings.sign_in_providers = vec![
            // No method given: the provider offers both, so client_secret_basic.
            provider("op", &issuer, "bulkhead-basic", None),
            provider(
                "op-post",
                &issuer,
                "bulkhead-post",
                Some(TokenEndpointAuthMethod::ClientSecretPost),
            ),
        ];
    })
    .await;
    assert_eq!(
        s.call(Method::GET, "/v1/auth/providers", None, None)
            .await
            .assert_status(200),
        &json!([{ "name": "op", "kind": "oidc" }, { "name": "op-post", "kind": "oidc" }])
    );
    let start = async |name: &str, session: Option<&str>| -> Value {
        let path = match session {
            None => format!("/v1/auth/providers/{name}/start"),
            Some(_) => format!("/v1/me/identities/{name}/start"),
        };
        s.call(Method::POST, &path, session, None)
            .await
            .assert_status(200)
            .clone()
    };
    let finish = async |name: &str, session: Option<&str>, body: Value| -> Reply {
        let path = match session {
            None => format!("/v1/auth/providers/{name}/finish"),
            Some(_) => format!("/v1/me/identities/{name}/finish"),
        };
        s.call(Method::POST, &path, session, Some(body)).await
    };
    let returned = |(code, state, iss): (String, String, String)| json!({ "code": code, "state": state, "iss": iss });

    // The authorization request: code flow, PKCE S256, a nonce, openid among the scopes.
    let started = start("op", None).await;
    let url = reqwest::Url::parse(started["authorize_url"].as_str().unwrap()).unwrap();
    assert!(
        url.as_str().starts_with(&format!("{issuer}/auth?")),
        "{url}"
    );
    let param = |name: &str| {
        url.query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    assert_eq!(param("response_type").as_deref(), Some("code"));
    assert_eq!(param("code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(param("scope").as_deref(), Some("openid email profile"));
    assert!(param("nonce").is_some_and(|nonce| nonce.len() >= 32));
    // Nobody linked this account: refused, saying how to link.
    let answer = finish(
        "op",
        None,
        returned(
            op.authorize(started["authorize_url"].as_str().unwrap(), "alice-at-op")
                .await,
        ),
    )
    .await;
    answer.assert_problem(403, "identity_not_linked");

    // Alice links her account with client_secret_basic; Bob his with client_secret_post.
    let alice = s.user_with_session("alice@example.com").await;
    let bob = s.user_with_session("bob@example.com").await;
    for (name, session, login) in [
        ("op", &alice, "alice-at-op"),
        ("op-post", &bob, "bob-at-op"),
    ] {
        let started = start(name, Some(session.as_str())).await;
        let answer = op
            .authorize(started["authorize_url"].as_str().unwrap(), login)
            .await;
        let linked = finish(name, Some(session.as_str()), returned(answer)).await;
        let linked = linked.assert_status(201);
        assert_eq!(linked["subject"], login);
        assert_eq!(linked["login"], format!("{login}@example.com"));
    }
    // Each signs in with it.
    let sign_in = async |name: &str, login: &str| -> Reply {
        let started = start(name, None).await;
        let answer = op
            .authorize(started["authorize_url"].as_str().unwrap(), login)
            .await;
        finish(name, None, returned(answer)).await
    };
    for (name, login, email) in [
        ("op", "alice-at-op", "alice@example.com"),
        ("op-post", "bob-at-op", "bob@example.com"),
    ] {
        let session = sign_in(name, login).await;
        let access = session.assert_status(200)["access_token"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            s.get("/v1/me", &access).await.assert_status(200)["email"],
            email
        );
    }

    // RFC 9207: the provider says it sends `iss`; an answer without it, or from another
    // issuer, is refused.
    for iss in [None, Some("https://issuer.invalid")] {
        let started = start("op", None).await;
        let (code, state, _) = op
            .authorize(started["authorize_url"].as_str().unwrap(), "alice-at-op")
            .await;
        let mut body = json!({ "code": code, "state": state });
        if let Some(iss) = iss {
            body["iss"] = json!(iss);
        }
        let refused = finish("op", None, body).await;
        refused.assert_problem(400, "sign_in_failed");
        assert!(
            refused.body["detail"].as_str().unwrap().contains("iss"),
            "{}",
            refused.text
        );
    }

    // Each answer a client must refuse is refused, saying why, without echoing the token.
    for (mode, why) in [
        ("altered-signature", "its signature does not verify"),
        ("altered-claims", "its signature does not verify"),
        ("unknown-key", "signed with a key it does not publish"),
        ("foreign-key", "issued by another issuer"),
        ("expired", "it has expired"),
        ("other-audience", "issued to another client"),
        ("other-issuer", "issued by another issuer"),
        ("other-nonce", "made for another sign-in"),
        ("alg-none", "not signed"),
        ("not-a-jwt", "not an OpenID Connect token answer"),
        ("missing", "without an ID token"),
        ("userinfo-other-subject", "another account"),
    ] {
        op.tamper(mode).await;
        let refused = sign_in("op", "alice-at-op").await;
        refused.assert_problem(400, "sign_in_failed");
        let detail = refused.body["detail"].as_str().unwrap();
        assert!(detail.contains(why), "{mode}: {detail}");
        assert!(!refused.text.contains("eyJ"), "{mode}: {}", refused.text);
    }
    op.tamper("off").await;
    sign_in("op", "alice-at-op").await.assert_status(200);

    // A provider limiting us is held as any other: 503 with Retry-After, new sign-ins refused
    // at once without reaching it, and signing in works again once the wait is over.
    op.tamper("limited").await;
    let limited = sign_in("op", "alice-at-op").await;
    limited.assert_problem(503, "sign_in_unavailable");
    assert!(limited.header("retry-after").is_some());
    s.call(Method::POST, "/v1/auth/providers/op/start", None, None)
        .await
        .assert_problem(503, "sign_in_unavailable");
    op.tamper("off").await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    sign_in("op", "alice-at-op").await.assert_status(200);

    // In cookie mode (the dashboard's callback page): the refresh token is an HttpOnly cookie,
    // and a request a browser marks as cross-site is refused.
    let cookie_finish = async |site: &str| -> Reply {
        let started = start("op", None).await;
        let answer = op
            .authorize(started["authorize_url"].as_str().unwrap(), "alice-at-op")
            .await;
        TestServer::send(
            s.request(Method::POST, "/v1/auth/session/providers/op/finish", None)
                .header("sec-fetch-site", site)
                .json(&returned(answer)),
        )
        .await
    };
    cookie_finish("cross-site")
        .await
        .assert_problem(403, "csrf_failed");
    let session = cookie_finish("same-origin").await;
    assert!(session.assert_status(200)["access_token"].is_string());
    assert!(
        session.body.get("refresh_token").is_none(),
        "{}",
        session.text
    );
    let cookies: Vec<&str> = session
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|value| value.to_str().unwrap())
        .collect();
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("__Secure-bulkhead_refresh=") && c.contains("HttpOnly")),
        "{cookies:?}"
    );
    // Bad input: an unknown provider, an oversized code.
    s.call(
        Method::POST,
        "/v1/auth/providers/nobody/finish",
        None,
        Some(json!({ "code": "c", "state": "s" })),
    )
    .await
    .assert_problem(404, "not_found");
    s.call(
        Method::POST,
        "/v1/auth/providers/op/finish",
        None,
        Some(json!({ "code": "c".repeat(513), "state": "s" })),
    )
    .await
    .assert_problem(422, "invalid_request");

    // The provider rotates its signing key: once the last fetch of its keys is older than
    // the cooldown, the new key is fetched when a token names it — no restart.
    let kid = op.rotate().await;
    assert_eq!(kid, "key-2");
    tokio::time::sleep(JWKS_REFETCH_COOLDOWN + Duration::from_millis(200)).await;
    for _ in 0..2 {
        sign_in("op", "alice-at-op").await.assert_status(200);
    }
}
