//! The client commands of the `bulkhead` binary (`login`, `projects`, `services`, `deploy`,
//! `deployments`, `providers`, `routes`, `tokens`), run as processes against the real server
//! with a credentials directory of their own: what they print, what they store, and their
//! exit statuses.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;

use crate::support::{ADMIN_TOKEN, PASSWORD, TestServer, eventually, platform};

crate::db_tests!(
    a_user_deploys_from_scratch_with_the_cli,
    credentials_are_private_and_refreshed,
    exit_statuses_say_what_went_wrong,
    a_deployment_that_does_not_end_healthy_exits_9,
);

/// A process's answer.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// Its stdout, once it succeeded.
    #[track_caller]
    fn ok(&self) -> &str {
        self.exits(0);
        &self.stdout
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(self.ok())
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.stdout))
    }

    /// Its stderr, once it exited with `code`.
    #[track_caller]
    fn exits(&self, code: i32) -> &str {
        assert_eq!(
            self.code, code,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        &self.stderr
    }
}

/// The `bulkhead` binary with a config directory of its own, and environment variables.
struct Cli {
    config: TempDir,
    env: Vec<(&'static str, String)>,
}

impl Cli {
    fn new() -> Self {
        Self {
            config: tempfile::tempdir().unwrap(),
            env: vec![],
        }
    }

    /// One that uses an API token from the environment (`BULKHEAD_TOKEN`, `BULKHEAD_URL`).
    fn with_token(server: &str, token: &str) -> Self {
        let mut cli = Self::new();
        cli.env = vec![
            ("BULKHEAD_TOKEN", token.to_owned()),
            ("BULKHEAD_URL", server.to_owned()),
        ];
        cli
    }

    fn credentials(&self) -> PathBuf {
        self.config.path().join("bulkhead/credentials.json")
    }

    /// Runs `bulkhead` with the arguments of `line`, split as a shell would.
    async fn run(&self, line: &str) -> Ran {
        self.run_with_stdin(line, "").await
    }

    async fn run_with_stdin(&self, line: &str, stdin: &str) -> Ran {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_bulkhead"));
        command
            .args(shell_words::split(line).unwrap())
            .env_remove("BULKHEAD_URL")
            .env_remove("BULKHEAD_TOKEN")
            .env("BULKHEAD_CONFIG_DIR", self.config.path().join("bulkhead"))
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).await.unwrap();
        drop(input);
        let output = child.wait_with_output().await.unwrap();
        Ran {
            code: output.status.code().expect("exited, not killed"),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Logs in as `email`, with [`PASSWORD`] on stdin.
    async fn login(&self, s: &TestServer, email: &str) {
        let line = format!("login --server {} --email {email} --password-stdin", s.base);
        self.run_with_stdin(&line, &format!("{PASSWORD}\n"))
            .await
            .ok();
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn stored(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The line of a table that starts with `first`.
fn row<'a>(table: &'a str, first: &str) -> Option<&'a str> {
    table
        .lines()
        .find(|line| line.trim_start().starts_with(first))
}

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

    // Providers as a member sees them: state and health, not the reasons.
    let providers = cli.run("providers list").await;
    let metal = row(providers.ok(), "metal").expect("metal is listed");
    assert!(metal.contains("healthy"), "{metal}");

    // Routes and edges, as an administrator.
    let service_id = service["id"].as_str().unwrap();
    s.post(
        &format!("/v1/projects/{project}/domains"),
        ADMIN_TOKEN,
        json!({ "hostname": "shop.example.com", "service_id": service_id }),
    )
    .await
    .assert_status(201);
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
