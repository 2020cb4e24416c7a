//! Exit statuses that say what went wrong, and the list of them in `--help`.

use serde_json::json;

use super::Cli;
use crate::support::{ADMIN_TOKEN, TestServer};

crate::db_tests!(exit_statuses_say_what_went_wrong);

async fn exit_statuses_say_what_went_wrong(s: TestServer) {
    let cli = Cli::new();
    let anonymous = cli.run("projects list").await;
    assert!(
        anonymous.exits(3).contains("bulkhead login"),
        "{}",
        anonymous.stderr
    );
    s.user_create("ana@example.com").await;
    cli.login(&s, "ana@example.com").await;
    cli.run("projects create shop").await.ok();

    // Another tenant's project: what the server answers, as the exit status.
    let bob = s.user_with_session("bob@example.com").await;
    let theirs = s.project_create(&bob, "theirs").await;
    let ana = s.login("ana@example.com").await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (expected, code) = match s.get(&format!("/v1/projects/{theirs}"), &ana).await.status {
        404 => (5, "not_found"),
        403 => (4, "forbidden"),
        other => panic!("the server answered {other}"),
    };
    let refused = cli.run(&format!("projects show {theirs}")).await;
    assert!(refused.exits(expected).contains(code), "{}", refused.stderr);

    // A name nobody has, and input the schema refuses.
    let unknown = cli.run("projects show nope").await;
    assert!(
        unknown.exits(5).contains("no project named `nope`"),
        "{}",
        unknown.stderr
    );
    cli.run("services list -p nope").await.exits(5);
    let invalid = cli
        .run("projects environments create -p shop 'Not A Name'")
        .await;
    assert!(
        invalid.exits(7).contains("invalid input"),
        "{}",
        invalid.stderr
    );
    // A body the server refuses: a service in an environment of another project.
    let environment = s
        .post(
            &format!("/v1/projects/{theirs}/environments"),
            &bob,
            json!({ "name": "prod" }),
        )
        .await;
    let foreign = environment.assert_status(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = cli
        .run(&format!(
            "services create -p shop --environment {foreign} --name web --image shop/web:1 --port 8080"
        ))
        .await;
    assert!([5, 7].contains(&refused.code), "{}", refused.stderr);
    // Usage errors are clap's; no server there is 8.
    cli.run("services create -p shop").await.exits(2);
    Cli::with_token("http://127.0.0.1:9", ADMIN_TOKEN)
        .run("projects list")
        .await
        .exits(8);
    // The statuses and the environment are in the help.
    let help = cli.run("--help").await;
    assert!(help.ok().contains("Exit status:"), "{}", help.stdout);
    assert!(
        help.stdout
            .contains("9  the deployment followed ended unhealthy")
    );
    assert!(help.stdout.contains("BULKHEAD_TOKEN"));
}
