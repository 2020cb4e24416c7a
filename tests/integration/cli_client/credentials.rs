//! The credentials file: private, without the password, refreshed after a 401, refused when
//! others may read it; logging in with an API token.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::{Cli, mode, stored};
use crate::support::{PASSWORD, TestServer};

crate::db_tests!(credentials_are_private_and_refreshed);

async fn credentials_are_private_and_refreshed(s: TestServer) {
    s.user_create("ana@example.com").await;
    let cli = Cli::new();
    cli.login(&s, "ana@example.com").await;
    let path = cli.credentials();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let first = stored(&path);
    assert!(!first.to_string().contains(PASSWORD), "{first}");
    assert_eq!(first["server"], s.base);
    assert_eq!(first["kind"], "session");

    // --verbose names each operation and its status, never the token.
    let verbose = cli.run("projects list --verbose").await;
    verbose.ok();
    assert!(
        verbose.stderr.contains("project_list -> 200"),
        "{}",
        verbose.stderr
    );
    let access = first["access_token"].as_str().unwrap();
    assert!(!verbose.stderr.contains(access) && !verbose.stdout.contains(access));

    // An expired access token is refreshed once, and the new tokens are stored.
    let mut expired = first.clone();
    expired["access_token"] = json!("expired-access-token");
    std::fs::write(&path, expired.to_string()).unwrap();
    let refreshed = cli.run("projects list --verbose").await;
    refreshed.ok();
    assert!(
        refreshed.stderr.contains("project_list -> 401"),
        "{}",
        refreshed.stderr
    );
    assert!(
        refreshed.stderr.contains("session_refresh -> 200"),
        "{}",
        refreshed.stderr
    );
    let renewed = stored(&path);
    assert_ne!(renewed["access_token"], "expired-access-token");
    assert_ne!(renewed["refresh_token"], first["refresh_token"]);
    assert_eq!(mode(&path), 0o600);

    // A file that others may read is refused, saying how to fix it.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = cli.run("projects list").await;
    assert!(refused.exits(3).contains("chmod 600"), "{}", refused.stderr);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    cli.run("projects list").await.ok();

    // The stored tokens go to no other server than the one that issued them: another
    // --server is refused before anything is sent to it.
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let other = format!("http://{}", elsewhere.local_addr().unwrap());
    let refused = cli.run(&format!("projects list --server {other}")).await;
    assert!(
        refused.exits(3).contains("logged in to"),
        "{}",
        refused.stderr
    );
    assert!(
        elsewhere.accept().is_err(),
        "the stored token was sent to {other}"
    );
    let logout_elsewhere = cli.run(&format!("logout --server {other}")).await;
    logout_elsewhere.exits(3);
    assert!(
        elsewhere.accept().is_err(),
        "the refresh token was sent to {other}"
    );
    assert!(path.exists(), "a refused logout keeps the credentials");

    // An API token instead of a password; a wrong one is not stored.
    let session = s.login("ana@example.com").await;
    let token = s
        .post(
            "/v1/tokens",
            session["access_token"].as_str().unwrap(),
            json!({ "name": "laptop", "scopes": ["write"] }),
        )
        .await;
    let secret = token.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let with_token = Cli::new();
    let login = format!("login --server {} --token-stdin", s.base);
    with_token
        .run_with_stdin(&login, &format!("{secret}\n"))
        .await
        .ok();
    assert_eq!(mode(&with_token.credentials()), 0o600);
    assert_eq!(stored(&with_token.credentials())["kind"], "api_token");
    with_token.run("projects create blog").await.ok();
    let wrong = Cli::new();
    wrong
        .run_with_stdin(&login, "bh_not_a_token\n")
        .await
        .exits(3);
    assert!(!wrong.credentials().exists());
}
