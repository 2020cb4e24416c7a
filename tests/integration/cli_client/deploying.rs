//! Deploying from scratch with the CLI alone, following rollouts to their end, and what the
//! other client commands show along the way.

use serde_json::json;
use tokio::io::AsyncBufReadExt;

use super::{Cli, row, stored};
use crate::support::{ADMIN_TOKEN, TestServer, eventually, platform};

crate::db_tests!(
    a_user_deploys_from_scratch_with_the_cli,
    a_deployment_that_does_not_end_healthy_exits_9,
);

async fn a_user_deploys_from_scratch_with_the_cli(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    s.user_create("ana@example.com").await;
    let cli = Cli::new();
    cli.login(&s, "ana@example.com").await;

    // A project, an environment and a service, named by name.
    let created = cli.run("projects create shop").await;
    assert!(row(created.ok(), "name").unwrap().contains("shop"));
    let listed = cli.run("projects list").await;
    assert!(row(listed.ok(), "ID").unwrap().contains("NAME"));
    assert!(listed.stdout.contains(" shop "), "{}", listed.stdout);
    let listed = cli.run("projects list --output json").await.json();
    assert_eq!(listed["items"][0]["name"], "shop");
    let project = listed["items"][0]["id"].as_str().unwrap().to_owned();
    cli.run("projects environments create -p shop production")
        .await
        .ok();
    let service = cli
        .run(
            "services create -p shop --environment production --name web --port 8080 \
             --command 'python3 -m http.server $PORT --bind 127.0.0.1' --replicas 1 \
             --provider metal --output json",
        )
        .await
        .json();
    assert_eq!(
        service["source"]["command"],
        json!([
            "python3",
            "-m",
            "http.server",
            "$PORT",
            "--bind",
            "127.0.0.1"
        ])
    );
    assert_eq!(service["placement"]["providers"][0]["name"], "metal");
    let services = cli.run(&format!("services list -p {project}")).await;
    assert!(row(services.ok(), service["id"].as_str().unwrap()).is_some());
    // Updated: what is given changes, the rest stays; nothing given is refused.
    let updated = cli
        .run("services update -p shop web --replicas 2 --port 8081 --output json")
        .await
        .json();
    assert_eq!(
        (updated["replicas"].clone(), updated["port"].clone()),
        (json!(2), json!(8081))
    );
    assert_eq!(updated["source"], service["source"]);
    assert_eq!(updated["placement"], service["placement"]);
    let refused = cli.run("services update -p shop web").await;
    assert!(
        refused.exits(7).contains("nothing to change"),
        "{}",
        refused.stderr
    );
    let refused = cli.run("services update -p shop web --replicas -1").await;
    refused.exits(2);
    let back = cli
        .run("services update -p shop web --replicas 1 --port 8080 --provider metal --output json")
        .await
        .json();
    assert_eq!(
        (back["replicas"].clone(), back["port"].clone()),
        (json!(1), json!(8080))
    );

    // Deploy, following the rollout until it is healthy.
    let deployed = cli.run("deploy -p shop -s web").await;
    let progress = deployed.ok();
    assert!(progress.contains("instance.placed"), "{progress}");
    assert!(progress.contains("deployment.healthy"), "{progress}");
    assert!(
        deployed.stderr.contains("ended healthy"),
        "{}",
        deployed.stderr
    );
    let deployments = cli.run("deployments list -p shop -s web").await;
    assert!(row(deployments.ok(), "ID").is_some());
    assert!(
        deployments.stdout.contains(" healthy "),
        "{}",
        deployments.stdout
    );

    // Detached: the deployment as queued, at once; then followed by its id.
    let detached = cli
        .run("deploy -p shop -s web --detach --output json")
        .await
        .json();
    assert_eq!(detached["number"], 2);
    let deployment = detached["id"].as_str().unwrap();
    let followed = cli
        .run(&format!(
            "deployments events -p shop -s web {deployment} --follow"
        ))
        .await;
    assert!(
        followed.ok().contains("deployment.healthy"),
        "{}",
        followed.stdout
    );

    // The service's output: the newest lines (python's access log of the agent's health
    // checks, every 3 s, on stderr), a deployment's from a time as JSON, and followed.
    let logs = cli.run("logs -p shop -s web -n 1000").await;
    assert!(
        logs.ok()
            .lines()
            .any(|line| line.contains(" stderr ") && line.contains("\"GET / HTTP/1.1\" 200")),
        "{}",
        logs.stdout
    );
    // Paged one line at a time: the deployment's instance has said it started, and answered
    // a health check, within seconds.
    let started = std::time::Instant::now();
    let lines = loop {
        let of_deployment = cli
            .run("logs -p shop -s web --deployment 2 --since 10m -n 1 --output json")
            .await;
        let lines: Vec<serde_json::Value> = of_deployment
            .ok()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        if lines.len() >= 2 {
            break lines;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{}",
            of_deployment.stdout
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert!(lines.iter().all(|line| line["deployment_id"] == deployment));
    cli.run("logs -p shop -s web --since soon").await.exits(2);
    cli.run("logs -p shop -s web -n 0").await.exits(2);
    cli.run("logs -p shop -s web --deployment 99")
        .await
        .exits(5);
    let mut follower = cli.spawn("logs -p shop -s web -n 1 --follow");
    let mut printed = tokio::io::BufReader::new(follower.stdout.take().unwrap()).lines();
    // Two more access lines of the health checks (python also prints other things on stderr,
    // such as a traceback when a check's connection is closed early).
    let (mut checks, mut read) = (0, Vec::new());
    while checks < 2 {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), printed.next_line())
            .await
            .unwrap_or_else(|_| panic!("followed lines keep coming: {read:#?}"))
            .unwrap()
            .expect("the follower goes on");
        checks += usize::from(line.contains("\"GET / HTTP/1.1\" 200"));
        read.push(line);
        assert!(read.len() < 200, "{read:#?}");
    }
    drop(follower);

    // The caps, with what is used: the project's, and the user's own.
    let limits = cli.run("limits -p shop").await;
    let services = row(limits.ok(), "services_per_project").unwrap();
    assert!(
        services
            .split_whitespace()
            .eq(["services_per_project", "services", "1", "100"]),
        "{}",
        limits.stdout
    );
    let mine = cli.run("limits --output json").await.json();
    assert_eq!(mine["limits"][0]["name"], "projects_per_user", "{mine}");
    assert_eq!(mine["limits"][0]["used"], 1, "{mine}");

    // At a commit given by its full id (a short one is a usage error, sent nowhere).
    let refused = cli.run("deploy -p shop -s web --commit 3f9a1c0").await;
    assert!(
        refused.exits(2).contains("full commit id"),
        "{}",
        refused.stderr
    );
    let commit = "3f9a1c0e".repeat(5);
    let at_commit = cli
        .run(&format!("deploy -p shop -s web --commit {commit}"))
        .await;
    assert!(
        at_commit.ok().contains("commit 3f9a1c0"),
        "{}",
        at_commit.stdout
    );
    let deployments = cli.run("deployments list -p shop -s web").await;
    assert!(
        deployments
            .ok()
            .lines()
            .any(|line| line.contains(" 3f9a1c0 ") && line.contains("healthy")),
        "{}",
        deployments.stdout
    );

    // Providers as a member sees them: state and health, not the reasons.
    let providers = cli.run("providers list").await;
    let metal = row(providers.ok(), "metal").expect("metal is listed");
    assert!(metal.contains("healthy"), "{metal}");

    // Routes and edges, as an administrator.
    let service_id = service["id"].as_str().unwrap();
    // A domain, added and verified with the CLI (its challenge published on the platform's
    // DNS); a second one added and removed.
    let added = cli
        .run("domains add -p shop -s web shop.example.com --output json")
        .await;
    assert!(
        added
            .stderr
            .contains("_bulkhead-challenge.shop.example.com"),
        "{}",
        added.stderr
    );
    let added = added.json();
    assert_eq!(added["status"], "pending");
    crate::support::dns().txt_add(
        added["challenge"]["name"].as_str().unwrap(),
        added["challenge"]["value"].as_str().unwrap().to_owned(),
    );
    let listed = cli.run("domains list -p shop").await;
    let pending = row(listed.ok(), "shop.example.com").expect("the domain is listed");
    assert!(
        pending.contains("pending") && pending.contains(service_id),
        "{pending}"
    );
    let verified = cli
        .run("domains verify -p shop SHOP.example.com. --output json")
        .await
        .json();
    assert_eq!(verified["status"], "verified");
    cli.run("domains verify -p shop nope.example.com")
        .await
        .exits(5);
    cli.run("domains add -p shop -s web www.example.com")
        .await
        .ok();
    cli.run("domains remove -p shop www.example.com").await.ok();
    let listed = cli.run("domains list -p shop --output json").await.json();
    let hostnames: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["hostname"].as_str().unwrap())
        .collect();
    assert_eq!(hostnames, ["shop.example.com"]);
    let admin = Cli::with_token(&s.base, ADMIN_TOKEN);
    eventually("the route is in the table", async || {
        let table = admin.run("routes table").await;
        row(table.ok(), "shop.example.com").is_some_and(|route| route.contains(service_id))
    })
    .await;
    let changes = admin.run("routes changes --output json").await.json();
    assert!(changes["revision"].as_i64().unwrap() >= 1, "{changes}");
    s.post(
        "/v1/edges/edge-1/status",
        ADMIN_TOKEN,
        json!({ "revision": 1, "agent_version": "edge-test-9" }),
    )
    .await
    .assert_status(200);
    let edges = admin.run("routes edges").await;
    let edge = row(edges.ok(), "edge-1").expect("the edge is listed");
    assert!(edge.contains("edge-test-9"), "{edge}");

    // An API token: shown once, on stdout alone; it works until revoked.
    let created = cli.run("tokens create --name ci --scope read").await;
    let secret = created.ok().trim().to_owned();
    assert!(secret.starts_with("bh_") && !secret.contains(char::is_whitespace));
    assert!(!created.stderr.contains(&secret));
    let tokens = cli.run("tokens list --output json").await.json();
    let token = tokens["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci")
        .expect("the token is listed");
    assert!(token.get("secret").is_none(), "{token}");
    let reader = Cli::with_token(&s.base, &secret);
    assert!(reader.run("projects list").await.ok().contains(" shop "));
    let id = token["id"].as_str().unwrap();
    cli.run(&format!("tokens revoke {id}")).await.ok();
    reader.run("projects list").await.exits(3);

    // Logging out ends the session and deletes the file.
    let refresh_token = stored(&cli.credentials())["refresh_token"].clone();
    cli.run("logout").await.ok();
    assert!(!cli.credentials().exists());
    cli.run("projects list").await.exits(3);
    s.call(
        reqwest::Method::POST,
        "/v1/auth/refresh",
        None,
        Some(json!({ "refresh_token": refresh_token })),
    )
    .await
    .assert_status(401);
}

async fn a_deployment_that_does_not_end_healthy_exits_9(s: TestServer) {
    let (_platform, _dir) = platform(&s).await;
    let cli = Cli::with_token(&s.base, ADMIN_TOKEN);
    cli.run("projects create shop").await.ok();
    cli.run("projects environments create -p shop production")
        .await
        .ok();
    // It never listens, so it never becomes healthy.
    cli.run(
        "services create -p shop --environment production --name mute --port 8080 \
         --command \"python3 -c 'import time; time.sleep(600)'\" --provider metal",
    )
    .await
    .ok();
    let detached = cli
        .run("deploy -p shop -s mute --detach --output json")
        .await
        .json();
    let deployment = detached["id"].as_str().unwrap();
    let target = format!("-p shop -s mute {deployment}");
    let cancelled = cli
        .run(&format!("deployments cancel {target} --output json"))
        .await
        .json();
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    let followed = cli
        .run(&format!("deployments events {target} --follow"))
        .await;
    assert!(
        followed.exits(9).contains("ended cancelled"),
        "{}",
        followed.stderr
    );
    assert!(
        followed.stdout.contains("deployment.queued"),
        "{}",
        followed.stdout
    );
    // Cancelling again answers the same; rolling back with no healthy deployment before is a
    // conflict.
    let again = cli
        .run(&format!("deployments cancel {target} --output json"))
        .await
        .json();
    assert_eq!(again["id"], cancelled["id"]);
    let rollback = cli.run("deployments rollback -p shop -s mute").await;
    assert!(
        rollback.exits(6).contains("(no_healthy_deployment)")
            || rollback.stderr.contains("(nothing_to_roll_back)"),
        "{}",
        rollback.stderr
    );
}
