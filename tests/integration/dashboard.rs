//! The web dashboard (`dashboard/`): the pages the server serves and their security headers, the
//! cookie mode of sessions the dashboard signs in with, the committed build being what its
//! sources build, and the whole dashboard driven in a real browser (Debian's Chromium, through
//! playwright-core) against a real server on the local platform.
//!
//! The Node tests need Node.js and npm (see [`crate::node`]); the browser test also needs
//! Chromium: `apt-get install chromium` on Debian (or set `CHROMIUM` to its path).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cookie::{Cookie, SameSite};
use reqwest::Method;
use serde_json::json;

use crate::db_tests;
use bulkhead::config::{SignInProvider, SignInProviderKind};

use crate::node::{CLIENT_PACKAGE, DASHBOARD_PACKAGE, Node, program_find, texts};
use crate::openid_connect::OpenIdProvider;
use crate::support::{ADMIN_TOKEN, Backend, PASSWORD, Reply, TestServer, platform};

/// The files of a build, as the server embeds them.
const BUILT_FILES: [&str; 3] = ["index.html", "app.js", "app.css"];

#[tokio::test]
async fn the_pages_are_served_with_strict_security_headers() {
    let s = TestServer::start(Backend::Sqlite).await.unwrap();

    let page = TestServer::send(s.http.get(s.url("/"))).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = page.header("content-security-policy").expect("a CSP");
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(directive), "{directive} missing: {policy}");
    }
    assert!(!policy.contains("unsafe"), "{policy}");
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));

    // The page's script and style are files of its own origin: nothing inline for the CSP to
    // have to allow, and nothing from elsewhere.
    let html = page.text.to_lowercase();
    for (at, _) in html.match_indices("<script") {
        let tag = &html[at..at + html[at..].find('>').unwrap()];
        assert!(tag.contains("src=\"/assets/"), "an inline script: {tag}");
    }
    assert!(!html.contains("<style"), "an inline style sheet");
    assert!(!html.contains(" style="), "an inline style attribute");
    assert!(!html.contains(" onload=") && !html.contains(" onclick="));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    assert!(html.contains("/assets/app.js") && html.contains("/assets/app.css"));

    for (asset, content_type) in [
        ("/assets/app.js", "text/javascript; charset=utf-8"),
        ("/assets/app.css", "text/css; charset=utf-8"),
    ] {
        let reply = TestServer::send(s.http.get(s.url(asset))).await;
        assert_eq!(reply.status, 200, "{asset}");
        assert_eq!(reply.header("content-type"), Some(content_type));
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
        let etag = reply.header("etag").expect("an ETag").to_owned();
        // A browser revalidates, and is told nothing changed without the bytes again.
        let again = TestServer::send(s.http.get(s.url(asset)).header("if-none-match", &etag)).await;
        assert_eq!(again.status, 304, "{asset}");
        assert!(again.text.is_empty());
        let built = std::fs::read(dist_dir().join(asset.trim_start_matches("/assets/"))).unwrap();
        assert_eq!(
            reply.text.as_bytes(),
            built,
            "{asset} is not the committed build"
        );
    }

    TestServer::send(s.http.get(s.url("/assets/app.js.map")))
        .await
        .assert_problem(404, "not_found");
    TestServer::send(s.http.get(s.url("/assets/..%2FCargo.toml")))
        .await
        .assert_problem(404, "not_found");
    // The API is not shadowed by the pages.
    let status = TestServer::send(s.http.get(s.url("/v1/status"))).await;
    assert_ne!(
        status.header("content-type"),
        Some("text/html; charset=utf-8")
    );
}

/// The API reference shares the dashboard's origin: a page there that another site could frame,
/// or that ran an injected script, could reach what the dashboard keeps.
#[tokio::test]
async fn the_api_reference_has_the_dashboards_security_headers() {
    let s = TestServer::start(Backend::Sqlite).await.unwrap();
    for path in [
        "/docs/",
        "/docs/swagger-initializer.js",
        "/docs/swagger-ui.css",
    ] {
        let reply = TestServer::send(s.http.get(s.url(path))).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text);
        let policy = reply.header("content-security-policy").expect("a CSP");
        for directive in [
            "default-src 'self'",
            "script-src 'self';",
            "connect-src 'self'",
            "object-src 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(
                policy.contains(directive),
                "{path}: {directive} missing: {policy}"
            );
        }
        assert!(!policy.contains("unsafe-eval"), "{policy}");
        assert_eq!(
            reply.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(reply.header("x-frame-options"), Some("DENY"), "{path}");
        assert_eq!(
            reply.header("referrer-policy"),
            Some("no-referrer"),
            "{path}"
        );
        if path == "/docs/" {
            // Its scripts are files, which `script-src 'self'` lets run.
            let html = reply.text.to_lowercase();
            for (at, _) in html.match_indices("<script") {
                let tag = &html[at..at + html[at..].find('>').unwrap()];
                assert!(tag.contains(" src="), "an inline script: {tag}");
            }
        }
    }
}

db_tests!(browser_sessions_keep_the_refresh_token_in_an_http_only_cookie);

async fn browser_sessions_keep_the_refresh_token_in_an_http_only_cookie(s: TestServer) {
    let email = "cookie-session@example.com";
    s.user_create(email).await;
    let credentials = json!({ "email": email, "password": PASSWORD });

    // Wrong password, and a login another site's page makes the browser send.
    let wrong = json!({ "email": email, "password": "not the password at all" });
    TestServer::send(session_call(&s, Method::POST, "/v1/auth/session", &[]).json(&wrong))
        .await
        .assert_problem(401, "unauthenticated");
    let cross_site = session_call(&s, Method::POST, "/v1/auth/session", &[])
        .header("sec-fetch-site", "cross-site")
        .json(&credentials);
    TestServer::send(cross_site)
        .await
        .assert_problem(403, "csrf_failed");

    let login = session_call(&s, Method::POST, "/v1/auth/session", &[])
        .header("sec-fetch-site", "same-origin")
        .json(&credentials);
    let login = TestServer::send(login).await;
    assert_eq!(login.status, 200, "{}", login.text);
    assert_eq!(login.header("cache-control"), Some("no-store"));
    assert!(login.body.get("refresh_token").is_none(), "{}", login.text);
    assert_eq!(login.body["token_type"], "Bearer");
    let access = login.body["access_token"].as_str().unwrap().to_owned();
    let csrf = login.body["csrf_token"].as_str().unwrap().to_owned();
    let cookies = set_cookies(&login);
    let refresh_cookie = &cookies["__Secure-bulkhead_refresh"];
    assert!(
        refresh_cookie.value().starts_with("bhr_"),
        "{refresh_cookie:?}"
    );
    let attributes = |cookie: &Cookie| {
        (
            cookie.http_only(),
            cookie.secure(),
            cookie.same_site(),
            cookie.path().map(str::to_owned),
        )
    };
    assert_eq!(
        attributes(refresh_cookie),
        (
            Some(true),
            Some(true),
            Some(SameSite::Strict),
            Some("/v1/auth/session".to_owned())
        ),
        "{refresh_cookie:?}"
    );
    assert!(max_age(refresh_cookie) > 0);
    let csrf_cookie = &cookies["bulkhead_csrf"];
    assert_eq!(csrf_cookie.value(), csrf);
    assert_eq!(
        attributes(csrf_cookie),
        (
            None,
            Some(true),
            Some(SameSite::Strict),
            Some("/".to_owned())
        ),
        "{csrf_cookie:?}"
    );
    assert!(!csrf.contains(refresh_cookie.value()));
    let me = s.get("/v1/me", &access).await;
    assert_eq!(me.assert_status(200)["email"], email);

    // Refreshing needs the cookie, the session's own CSRF token, and this origin.
    let old_refresh = refresh_cookie.value().to_owned();
    let cookie = format!("__Secure-bulkhead_refresh={old_refresh}; bulkhead_csrf={csrf}");
    let refresh = |headers: &[(&str, &str)]| {
        session_call(&s, Method::POST, "/v1/auth/session/refresh", headers)
    };
    TestServer::send(refresh(&[]))
        .await
        .assert_problem(401, "unauthenticated");
    TestServer::send(refresh(&[("cookie", cookie.as_str())]))
        .await
        .assert_problem(403, "csrf_failed");
    let other_session = "0".repeat(40);
    let wrong_csrf = [
        ("cookie", cookie.as_str()),
        ("x-csrf-token", &other_session),
    ];
    TestServer::send(refresh(&wrong_csrf))
        .await
        .assert_problem(403, "csrf_failed");
    let same_site = [
        ("cookie", cookie.as_str()),
        ("x-csrf-token", &csrf),
        ("sec-fetch-site", "same-site"),
    ];
    TestServer::send(refresh(&same_site))
        .await
        .assert_problem(403, "csrf_failed");

    // None of those refusals spent the refresh token: it rotates once, now.
    let good = [("cookie", cookie.as_str()), ("x-csrf-token", &csrf)];
    let rotated = TestServer::send(refresh(&good)).await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    assert!(rotated.body.get("refresh_token").is_none());
    let rotated_cookies = set_cookies(&rotated);
    let new_refresh = rotated_cookies["__Secure-bulkhead_refresh"]
        .value()
        .to_owned();
    let new_csrf = rotated.body["csrf_token"].as_str().unwrap().to_owned();
    assert_ne!(new_refresh, old_refresh);
    assert_ne!(new_csrf, csrf);
    assert_eq!(rotated_cookies["bulkhead_csrf"].value(), new_csrf);
    let new_access = rotated.body["access_token"].as_str().unwrap().to_owned();
    s.get("/v1/me", &new_access).await.assert_status(200);

    // The old cookie again (stolen, or replayed): refused, its cookies cleared, and the whole
    // session revoked — the access token minted by the rotation stops working too.
    let replayed = TestServer::send(refresh(&good)).await;
    replayed.assert_problem(401, "unauthenticated");
    let cleared = set_cookies(&replayed);
    for name in ["__Secure-bulkhead_refresh", "bulkhead_csrf"] {
        assert_eq!(cleared[name].value(), "", "{name} is not cleared");
        assert_eq!(max_age(&cleared[name]), 0);
    }
    s.get("/v1/me", &new_access)
        .await
        .assert_problem(401, "unauthenticated");
    let new_cookie = format!("__Secure-bulkhead_refresh={new_refresh}");
    let after_reuse = [("cookie", new_cookie.as_str()), ("x-csrf-token", &new_csrf)];
    TestServer::send(refresh(&after_reuse))
        .await
        .assert_problem(401, "unauthenticated");

    // Logging out needs the CSRF token as well, then ends the session and clears the cookies.
    let login = session_call(&s, Method::POST, "/v1/auth/session", &[]).json(&credentials);
    let login = TestServer::send(login).await;
    let access = login.assert_status(200)["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let csrf = login.body["csrf_token"].as_str().unwrap().to_owned();
    let refresh_token = set_cookies(&login)["__Secure-bulkhead_refresh"]
        .value()
        .to_owned();
    let cookie = format!("__Secure-bulkhead_refresh={refresh_token}");
    let logout =
        |headers: &[(&str, &str)]| session_call(&s, Method::DELETE, "/v1/auth/session", headers);
    TestServer::send(logout(&[("cookie", cookie.as_str())]))
        .await
        .assert_problem(403, "csrf_failed");
    s.get("/v1/me", &access).await.assert_status(200);
    let out = TestServer::send(logout(&[
        ("cookie", cookie.as_str()),
        ("x-csrf-token", &csrf),
    ]))
    .await;
    assert_eq!(out.status, 204, "{}", out.text);
    assert_eq!(max_age(&set_cookies(&out)["__Secure-bulkhead_refresh"]), 0);
    s.get("/v1/me", &access)
        .await
        .assert_problem(401, "unauthenticated");
    let after_logout = [("cookie", cookie.as_str()), ("x-csrf-token", &csrf)];
    TestServer::send(refresh(&after_logout))
        .await
        .assert_problem(401, "unauthenticated");
    // Logging out without a session is no error (a tab whose session ended elsewhere).
    let nothing = TestServer::send(logout(&[])).await;
    assert_eq!(nothing.status, 204);
}

/// `BULKHEAD_BOOTSTRAP_PASSWORD` gives the first administrator a password to sign in to the
/// dashboard with; later starts (which `bulkhead dev` gives a password each time) change nothing.
#[tokio::test]
async fn the_first_administrator_signs_in_with_the_bootstrap_password() {
    let (database_url, dir) = crate::support::database_fresh(Backend::Sqlite)
        .await
        .unwrap();
    let first = "the first admin's password";
    let s = TestServer::start_on(Backend::Sqlite, database_url, dir, |settings| {
        settings.bootstrap_password = Some(first.to_owned().into());
    })
    .await;
    let email = s.app().settings.admin_email.clone();
    let sign_in = async |s: &TestServer, password: &str| {
        let body = json!({ "email": email, "password": password });
        TestServer::send(
            s.request(Method::POST, "/v1/auth/session", None)
                .json(&body),
        )
        .await
    };
    let signed_in = sign_in(&s, first).await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.text);
    let s = s
        .restart_with(|settings| {
            settings.bootstrap_password = Some("another password, later".to_owned().into());
        })
        .await;
    sign_in(&s, "another password, later")
        .await
        .assert_problem(401, "unauthenticated");
    assert_eq!(sign_in(&s, first).await.status, 200);
}

/// The committed `dashboard/dist/` is what `npm run build` makes of the sources (as the
/// committed OpenAPI document is checked), and the sources type-check against the typed client
/// of the committed document: a change of the API that breaks a page fails here.
#[test]
fn the_committed_build_is_what_the_sources_build() {
    let tools = Node::find();
    tools.install(CLIENT_PACKAGE);
    tools.install(DASHBOARD_PACKAGE);
    tools.npm_run(DASHBOARD_PACKAGE, "check");
    let out = tempfile::tempdir().unwrap();
    crate::node::run(
        tools
            .npm(DASHBOARD_PACKAGE)
            .args(["run", "--silent", "build"])
            .env("DASHBOARD_OUT", out.path()),
        "npm run build (in dashboard)",
    );
    let mut built: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    built.sort();
    let mut expected = BUILT_FILES.map(str::to_owned).to_vec();
    expected.sort();
    assert_eq!(
        built, expected,
        "the build makes other files than the server serves"
    );
    for file in BUILT_FILES {
        let fresh = std::fs::read(out.path().join(file)).unwrap();
        let committed = std::fs::read(dist_dir().join(file)).unwrap();
        assert!(
            fresh == committed,
            "dashboard/dist/{file} is stale: run `npm run build` in dashboard/ and commit dist/"
        );
    }
}

/// A new user's day in a real browser: sign in and accept the terms, create a project, an
/// environment and a service, deploy and watch it turn healthy live, deploy again and roll
/// back, invite a viewer who then sees no deploy button (and whom the API refuses), axe-core on
/// the main pages, and gcp suspended in its simulator showing on the providers page while the
/// service keeps its other instances healthy. What the browser made is then checked here,
/// through the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_signs_in_deploys_and_rolls_back_in_a_real_browser() {
    let chromium = chromium_find();
    tokio::task::spawn_blocking(|| {
        let tools = Node::find();
        tools.install(CLIENT_PACKAGE);
        tools.install(DASHBOARD_PACKAGE);
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));

    // An OpenID Provider whose client comes back to the dashboard's callback page: the server's
    // address is picked first, so that both can be told it.
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let redirect_uri = format!("http://{listen}/sign-in/callback");
    let op = OpenIdProvider::start(json!([{
        "client_id": "bulkhead-dashboard",
        "client_secret": "bulkhead-dashboard-secret-of-32-characters",
        "redirect_uris": [redirect_uri],
        "token_endpoint_auth_method": "client_secret_basic",
    }]))
    .await;
    let s = TestServer::start_with(Backend::Sqlite, |settings| {
        settings.listen = listen;
        settings.sign_in_providers = vec![SignInProvider {
            name: "corp".into(),
            kind: SignInProviderKind::Oidc,
            issuer: Some(op.issuer.clone()),
            token_endpoint_auth_method: None,
            authorize_url: None,
            token_url: None,
            userinfo_url: None,
            client_id: "bulkhead-dashboard".into(),
            client_secret: "bulkhead-dashboard-secret-of-32-characters".into(),
            redirect_uri,
            scopes: Vec::new(),
        }];
    })
    .await
    .unwrap();
    let (platform, _dir) = platform(&s).await;
    s.post(
        "/v1/terms",
        ADMIN_TOKEN,
        json!({ "version": "2026-12", "url": "https://example.com/terms/2026-12",
                "summary": "Be kind to the machines." }),
    )
    .await
    .assert_status(201);
    let (admin, viewer) = ("ana@example.com", "vic@example.com");
    for (email, is_admin) in [(admin, true), (viewer, false)] {
        s.post(
            "/v1/users",
            ADMIN_TOKEN,
            json!({ "email": email, "name": email, "password": PASSWORD, "is_admin": is_admin }),
        )
        .await
        .assert_status(201);
    }
    let screenshots = std::env::var_os("BULKHEAD_SCREENSHOT_DIR");

    let started = Instant::now();
    let mut test = tokio::process::Command::new(program_find("npm").unwrap());
    test.args(["run", "--silent", "browser-test"])
        .current_dir(DASHBOARD_PACKAGE)
        .env("BULKHEAD_URL", &s.base)
        .env("CHROMIUM", &chromium)
        .env("ADMIN_EMAIL", admin)
        .env("ADMIN_PASSWORD", PASSWORD)
        .env("VIEWER_EMAIL", viewer)
        .env("VIEWER_PASSWORD", PASSWORD)
        .env(
            "GCP_FAULTS_URL",
            format!("{}/_sim/faults", platform.gcp.url()),
        )
        .env("PROVIDERS", "gcp,aws,metal")
        .env("OIDC_PROVIDER", "corp")
        .env("OIDC_ACCOUNT", "ana-at-corp")
        .env("TEST_TIMEOUT_SECS", "400")
        .kill_on_drop(true);
    if let Some(dir) = screenshots {
        test.env("SCREENSHOT_DIR", dir);
    }
    let output = tokio::time::timeout(Duration::from_secs(480), test.output())
        .await
        .expect("the browser test did not finish within 480 s")
        .expect("npm run browser-test starts");
    let (stdout, stderr) = texts(&output);
    println!("{stdout}{stderr}");
    eprintln!("dashboard browser test took {:?}", started.elapsed());
    assert!(
        output.status.success(),
        "the browser test failed ({}):\n{stdout}{stderr}",
        output.status
    );
    assert!(!stdout.contains("not ok"), "{stdout}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    let tti: u64 = figure(&stdout, "TTI_MS=");
    assert!(tti > 0);
    assert!(figure(&stdout, "APP_JS_GZIP_BYTES=") < 200 * 1024);

    // Through the API: what the browser made exists, as the admin made it.
    let admin_token = s.login(admin).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let terms = s.get("/v1/me/terms", &admin_token).await;
    assert_eq!(terms.assert_status(200)["must_accept"], false);
    let projects = s.get("/v1/projects", &admin_token).await;
    let project = projects.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .first()
        .expect("the browser made a project")
        .clone();
    let project_id = project["id"].as_str().unwrap();
    let services = s
        .get(&format!("/v1/projects/{project_id}/services"), &admin_token)
        .await;
    let service_id = services.assert_status(200)["items"][0]["id"]
        .as_str()
        .expect("the browser made a service")
        .to_owned();
    let deployments = s
        .get(
            &format!("/v1/projects/{project_id}/services/{service_id}/deployments"),
            &admin_token,
        )
        .await;
    let deployments = deployments.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    assert!(deployments.len() >= 3, "{deployments:?}");
    let rollback = deployments
        .iter()
        .find(|deployment| !deployment["rollback_of"].is_null())
        .expect("the browser rolled back");
    let latest = deployments
        .iter()
        .max_by_key(|deployment| deployment["number"].as_i64())
        .unwrap();
    assert_eq!(latest["id"], rollback["id"], "{deployments:?}");
    assert_eq!(latest["state"], "healthy", "{latest}");
    // A deployment is tagged as lists are: a poller gets 304 while it is unchanged.
    let latest_path = format!(
        "/v1/projects/{project_id}/services/{service_id}/deployments/{}",
        latest["id"].as_str().unwrap()
    );
    let viewed = s.get(&latest_path, &admin_token).await;
    let etag = viewed
        .header("etag")
        .expect("a deployment has an ETag")
        .to_owned();
    let unchanged = TestServer::send(
        s.request(Method::GET, &latest_path, Some(&admin_token))
            .header("if-none-match", &etag),
    )
    .await;
    assert_eq!(unchanged.status, 304, "{}", unchanged.text);
    // No instance left the routes on the way: the metal agent's checks of a new process,
    // slower than the control plane's first one, do not undo it ("pending" is no failure).
    for deployment in &deployments {
        let id = deployment["id"].as_str().unwrap();
        let events = s
            .get(
                &format!("/v1/projects/{project_id}/services/{service_id}/deployments/{id}/events"),
                &admin_token,
            )
            .await;
        let events = events.assert_status(200)["items"]
            .as_array()
            .unwrap()
            .clone();
        assert!(
            !events
                .iter()
                .any(|event| event["kind"] == "instance.unhealthy"),
            "deployment #{}: {events:?}",
            deployment["number"]
        );
    }
    // The account the browser linked at the OpenID Provider, and signed in with.
    let identities = s.get("/v1/me/identities", &admin_token).await;
    let identities = identities.assert_status(200);
    assert_eq!(identities[0]["provider"], "corp", "{identities}");
    assert_eq!(identities[0]["subject"], "ana-at-corp");
    assert!(identities[0]["last_used_at"].is_string(), "{identities}");
    let members = s
        .get(&format!("/v1/projects/{project_id}/members"), &admin_token)
        .await;
    let members = members.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        members
            .iter()
            .any(|member| member["email"] == viewer && member["role"] == "viewer"),
        "{members:?}"
    );
    // The viewer may not deploy, whatever a page shows.
    let viewer_token = s.login(viewer).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.post(
        &format!("/v1/projects/{project_id}/services/{service_id}/deployments"),
        &viewer_token,
        json!({}),
    )
    .await
    .assert_problem(403, "forbidden");
    // The suspension the test made is over.
    let gcp = s.get("/v1/providers/gcp", ADMIN_TOKEN).await;
    assert_ne!(gcp.assert_status(200)["state"], "unavailable");
    platform.shutdown().await;
}

/// The number after `label` in `output` (a line `LABEL=123`).
fn figure(output: &str, label: &str) -> u64 {
    output
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("the browser test printed no {label}<number>:\n{output}"))
}

fn dist_dir() -> PathBuf {
    Path::new(DASHBOARD_PACKAGE).join("dist")
}

/// Debian's Chromium (or `CHROMIUM`), or a failure saying how to get it.
fn chromium_find() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            ["chromium", "chromium-browser"]
                .into_iter()
                .find_map(program_find)
        })
        .unwrap_or_else(|| {
            panic!(
                "the dashboard's browser test needs Chromium, which is not on the PATH: \
                 `apt-get install chromium` on Debian (or set CHROMIUM to its path)"
            )
        })
}

fn session_call(
    s: &TestServer,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    headers
        .iter()
        .fold(s.request(method, path, None), |builder, (name, value)| {
            builder.header(*name, *value)
        })
}

/// The cookies a response sets, by name.
fn set_cookies(reply: &Reply) -> BTreeMap<String, Cookie<'static>> {
    reply
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|header| {
            let cookie = Cookie::parse(header.to_str().unwrap().to_owned()).unwrap();
            (cookie.name().to_owned(), cookie)
        })
        .collect()
}

/// A cookie's `Max-Age` in seconds (every cookie the session endpoints set has one).
fn max_age(cookie: &Cookie) -> i64 {
    cookie
        .max_age()
        .unwrap_or_else(|| panic!("no Max-Age: {cookie:?}"))
        .whole_seconds()
}
