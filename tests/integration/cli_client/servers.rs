//! A list of servers (the replicas of one control plane): a request that the first does not
//! answer goes to the next, for `login`, reads, writes and the session's refresh; the list is
//! stored with the credentials, which go to it or a part of it only; a list of which no
//! server answers fails naming each.

use serde_json::json;

use super::{Cli, stored};
use crate::support::{ADMIN_TOKEN, PASSWORD, TestServer};

crate::db_tests!(a_list_of_servers_moves_on_from_one_that_does_not_answer);

/// A URL of a port on loopback that nothing listens on (bound, then let go).
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

async fn a_list_of_servers_moves_on_from_one_that_does_not_answer(s: TestServer) {
    let dead = closed_port();
    let moved_on = format!("{dead} could not be reached; sending to {}", s.base);
    s.user_create("ana@example.com").await;
    let cli = Cli::new();
    let login = cli
        .run_with_stdin(
            &format!(
                "login --server {dead},{} --email ana@example.com --password-stdin --verbose",
                s.base
            ),
            &format!("{PASSWORD}\n"),
        )
        .await;
    login.ok();
    assert!(login.stderr.contains(&moved_on), "{}", login.stderr);
    assert!(
        login.stderr.contains("session_login -> 200"),
        "{}",
        login.stderr
    );
    let credentials = stored(&cli.credentials());
    assert_eq!(credentials["server"], json!([dead, s.base]));

    // A write and a read with the stored list, no flag: each starts with the dead server and
    // goes on; the write is applied once.
    let created = cli.run("projects create shop --verbose").await;
    created.ok();
    assert!(created.stderr.contains(&moved_on), "{}", created.stderr);
    assert!(
        created.stderr.contains("project_create -> 201"),
        "{}",
        created.stderr
    );
    let listed = cli.run("projects list --output json --verbose").await;
    let names: Vec<_> = listed.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|project| project["name"].clone())
        .collect();
    assert_eq!(names, [json!("shop")]);
    assert!(listed.stderr.contains(&moved_on), "{}", listed.stderr);
    let access = credentials["access_token"].as_str().unwrap();
    assert!(!listed.stderr.contains(access) && !created.stderr.contains(access));

    // The session's refresh goes to the server that answers, and the whole list stays stored.
    let mut expired = credentials.clone();
    expired["access_token"] = json!("expired-access-token");
    std::fs::write(cli.credentials(), expired.to_string()).unwrap();
    let refreshed = cli.run("projects list --verbose").await;
    refreshed.ok();
    assert!(
        refreshed.stderr.contains("session_refresh -> 200"),
        "{}",
        refreshed.stderr
    );
    let renewed = stored(&cli.credentials());
    assert_ne!(renewed["access_token"], "expired-access-token");
    assert_eq!(renewed["server"], json!([dead, s.base]));

    // A part of the list is used as given; a list with another server is refused before
    // anything is sent to it.
    let alone = cli
        .run(&format!("projects list --server {} --verbose", s.base))
        .await;
    alone.ok();
    assert!(
        !alone.stderr.contains("could not be reached"),
        "{}",
        alone.stderr
    );
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let other = format!("http://{}", elsewhere.local_addr().unwrap());
    let refused = cli
        .run(&format!("projects list --server {},{other}", s.base))
        .await;
    assert!(
        refused.exits(3).contains("logged in to"),
        "{}",
        refused.stderr
    );
    assert!(
        elsewhere.accept().is_err(),
        "the stored token was sent to {other}"
    );

    // No server of the list answers: the unreachable status, naming each and why.
    // Another closed port than `dead` (a port just released can be handed out again, and a
    // list naming one server twice tries it once).
    let also_dead = std::iter::repeat_with(closed_port)
        .find(|port| *port != dead)
        .unwrap();
    let nobody = Cli::with_token(&format!("{dead}, {also_dead}"), ADMIN_TOKEN);
    for command in ["projects list", "projects create blog"] {
        let failed = nobody.run(command).await;
        let stderr = failed.exits(8);
        assert!(stderr.contains("no server answered (2 tried)"), "{stderr}");
        assert!(
            stderr.contains(&format!("cannot reach {dead}:")),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("cannot reach {also_dead}:")),
            "{stderr}"
        );
        assert!(stderr.contains("Connection refused"), "{stderr}");
    }
}
