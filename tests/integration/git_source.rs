//! Code from a git repository: a real `git daemon` serving a repository the test commits to,
//! GitHub-shaped pushes to a bound branch, the metal agent fetching and building each pushed
//! commit, and the new code answering through the edge (a real Caddy). A rollback runs the
//! commit before again; a missing commit, a failing build and an unreachable repository each
//! fail their deployment with the reason in its events while the previous version keeps
//! serving; a service whose code comes from a repository is never placed where it cannot be
//! built, and deploys nothing without a commit.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::deployments::{deployment_wait, event_items};
use crate::edge::{DOMAIN, caddy_start, edge_settings, edge_token, free_port, through_caddy};
use crate::git_intake::{now, push, push_event};
use crate::support::{Backend, TestServer, platform};

/// Serves `BUILT` (written by `build.sh`) at `/`, and 200 at `/health`.
const APP: &str = "import os,http.server as h\nclass H(h.BaseHTTPRequestHandler):\n def do_GET(s):\n  s.send_response(200); s.end_headers(); s.wfile.write(b'ok' if s.path=='/health' else open('BUILT','rb').read())\n def log_message(s,*a): pass\nh.HTTPServer(('127.0.0.1',int(os.environ['PORT'])),H).serve_forever()\n";

/// A repository the test commits to, served by `git daemon` on loopback (killed when dropped).
struct GitServer {
    base: tempfile::TempDir,
    port: u16,
    daemon: Child,
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs (apt-get install git)");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

impl GitServer {
    fn start() -> Self {
        let base = tempfile::tempdir().unwrap();
        git(base.path(), &["init", "--quiet", "-b", "main", "web"]);
        let port = free_port();
        let daemon = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", base.path().display()),
            ])
            .arg(base.path())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("git daemon starts (apt-get install git)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "git daemon never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { base, port, daemon }
    }

    fn work_tree(&self) -> PathBuf {
        self.base.path().join("web")
    }

    fn url(&self) -> String {
        format!("git://127.0.0.1:{}/web", self.port)
    }

    /// Commits `files` (name, content) on `main`; the new commit's id.
    fn commit(&self, files: &[(&str, &str)]) -> String {
        let tree = self.work_tree();
        for (name, content) in files {
            std::fs::write(tree.join(name), content).unwrap();
        }
        git(&tree, &["add", "--all"]);
        git(
            &tree,
            &["commit", "--quiet", "--allow-empty", "-m", "change"],
        );
        git(&tree, &["rev-parse", "HEAD"])
    }
}

/// The newest deployment of `service`, once there are `count` of them.
async fn deployment_number(s: &TestServer, owner: &str, service: &str, count: usize) -> Value {
    let started = Instant::now();
    loop {
        let list = s
            .get(&format!("{service}/deployments?limit=100"), owner)
            .await;
        let items = list.assert_status(200)["items"].as_array().unwrap().clone();
        if items.len() >= count {
            return items
                .into_iter()
                .max_by_key(|d| d["number"].as_u64())
                .unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no deployment {count}: {items:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the domain answers `body` through Caddy.
async fn serves(port: u16, body: &str) {
    let started = Instant::now();
    loop {
        let answer = through_caddy(port).await;
        if matches!(&answer, Ok((200, text)) if text == body) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the domain does not serve {body:?}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a failed deployment's events say.
async fn failure_said(s: &TestServer, service: &str, deployment: &Value) -> String {
    let id = deployment["id"].as_str().unwrap();
    let failed = deployment_wait(s, service, id, "failed", Duration::from_secs(60)).await;
    let events = event_items(s, service, id).await;
    format!("{failed}\n{}", serde_json::to_string(&events).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_runs_its_commit_through_the_edge_and_failures_say_why() {
    let s = TestServer::start(Backend::Sqlite).await.unwrap();
    let (_platform, _platform_dir) = platform(&s).await;
    let repo = GitServer::start();
    let build = "cat VERSION > BUILT\n";
    let first = repo.commit(&[("app.py", APP), ("build.sh", build), ("VERSION", "one")]);

    let made = s
        .project_with_service_of(
            "pushed",
            json!({
                "name": "web",
                "source": {
                    "type": "git",
                    "repository": repo.url(),
                    "build": ["sh", "build.sh"],
                    "command": ["python3", "app.py"],
                },
                "port": 8080,
                "health_check": { "path": "/health", "interval_ms": 200, "start_timeout_secs": 60 },
            }),
        )
        .await;
    let (owner, project, service_id) = (made.owner.clone(), made.id.clone(), made.service.clone());
    let service = format!("/v1/projects/{project}/services/{service_id}");
    let view = s.get(&service, &owner).await;
    assert_eq!(view.assert_status(200)["source"]["repository"], repo.url());

    // Nothing pushed, no commit given: nothing to deploy.
    s.call(
        Method::POST,
        &format!("{service}/deployments"),
        Some(&owner),
        None,
    )
    .await
    .assert_problem(409, "no_commit");
    crate::support::domain_bind(&s, &owner, &project, &service_id, DOMAIN).await;
    let created = s
        .post(
            &format!("/v1/projects/{project}/git-installations"),
            &owner,
            json!({ "bindings": [{ "repository": "acme/web", "branch": "main", "service_id": service_id }] }),
        )
        .await;
    let created = created.assert_status(201).clone();
    let installation = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let pushed = async |id: &str, commit: &str| {
        let body = push_event("acme/web", "refs/heads/main", commit, now());
        let (status, answer) = push(&s, &installation, &secret, id, body).await;
        assert_eq!(status, 202, "{answer}");
    };

    // The first push runs the first commit, built, behind the edge.
    pushed("push-1", &first).await;
    let one = deployment_number(&s, &owner, &service, 1).await;
    assert_eq!(one["revision"]["commit"], first);
    deployment_wait(
        &s,
        &service,
        one["id"].as_str().unwrap(),
        "healthy",
        Duration::from_secs(90),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let token = edge_token(&s, dir.path()).await;
    let caddy = caddy_start(dir.path()).await;
    let http_port = free_port();
    let sources = vec![bulkhead_edge::sync::Source::ControlPlane(s.base.clone())];
    let _edge = bulkhead_edge::start(edge_settings(
        dir.path(),
        sources,
        &token,
        &caddy,
        http_port,
    ))
    .await
    .unwrap();
    serves(http_port, "one").await;

    // A push of new code: the new commit answers.
    let second = repo.commit(&[("VERSION", "two")]);
    pushed("push-2", &second).await;
    let two = deployment_number(&s, &owner, &service, 2).await;
    assert_eq!(two["revision"]["commit"], second);
    deployment_wait(
        &s,
        &service,
        two["id"].as_str().unwrap(),
        "healthy",
        Duration::from_secs(90),
    )
    .await;
    serves(http_port, "two").await;

    // A rollback runs the first commit again.
    let rollback = s
        .call(
            Method::POST,
            &format!(
                "{service}/deployments/{}/rollback",
                two["id"].as_str().unwrap()
            ),
            Some(&owner),
            None,
        )
        .await;
    let rollback = rollback.assert_status(201).clone();
    assert_eq!(rollback["revision"]["commit"], first, "{rollback}");
    deployment_wait(
        &s,
        &service,
        rollback["id"].as_str().unwrap(),
        "healthy",
        Duration::from_secs(90),
    )
    .await;
    serves(http_port, "one").await;

    // A commit the repository does not have fails, saying so; the first keeps serving.
    let missing = "0123456789abcdef0123456789abcdef01234567";
    pushed("push-missing", missing).await;
    let failed = deployment_number(&s, &owner, &service, 4).await;
    let said = failure_said(&s, &service, &failed).await;
    assert!(said.contains("not our ref"), "{said}");
    assert!(said.contains("start_failed"), "{said}");
    serves(http_port, "one").await;

    // A build that fails fails its deployment, with its exit status.
    let broken = repo.commit(&[("build.sh", "echo cannot build >&2; exit 4\n")]);
    pushed("push-broken", &broken).await;
    let failed = deployment_number(&s, &owner, &service, 5).await;
    let said = failure_said(&s, &service, &failed).await;
    assert!(said.contains("exited with status 4"), "{said}");
    serves(http_port, "one").await;

    // A repository that does not answer.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    s.patch(
        &service,
        &owner,
        json!({ "source": {
            "type": "git",
            "repository": format!("git://127.0.0.1:{closed}/web"),
            "command": ["python3", "app.py"],
        } }),
    )
    .await
    .assert_status(200);
    let unreachable = s
        .call(
            Method::POST,
            &format!("{service}/deployments?commit={first}"),
            Some(&owner),
            None,
        )
        .await;
    let said = failure_said(&s, &service, unreachable.assert_status(201)).await;
    assert!(said.contains("fetching"), "{said}");
    serves(http_port, "one").await;

    // What is refused when written: credentials in the URL, other schemes, a token over
    // plain text, a token that is not a secret variable.
    for (source, why) in [
        (
            json!({"type": "git", "repository": "https://me:pw@example.com/web", "command": ["x"]}),
            "user or password",
        ),
        (
            json!({"type": "git", "repository": "file:///etc", "command": ["x"]}),
            "must start with",
        ),
        (
            json!({"type": "git", "repository": "git://example.com/web", "command": []}),
            "1 to 100",
        ),
        (
            json!({"type": "git", "repository": "http://example.com/web", "command": ["x"], "token_variable": "GIT_TOKEN"}),
            "https",
        ),
        (
            json!({"type": "git", "repository": "https://example.com/web", "command": ["x"], "token_variable": "git-token"}),
            "token_variable",
        ),
    ] {
        let reply = s.patch(&service, &owner, json!({ "source": source })).await;
        reply.assert_problem(422, "invalid_request");
        assert!(reply.text.contains(why), "{why}: {}", reply.text);
        assert!(!reply.text.contains("pw@"), "{}", reply.text);
    }
    s.patch(
        &service,
        &owner,
        json!({
            "source": {"type": "git", "repository": "https://example.com/web", "command": ["x"], "token_variable": "GIT_TOKEN"},
            "variables": [{ "name": "GIT_TOKEN", "value": "plain" }],
        }),
    )
    .await
    .assert_status(200);
    s.call(
        Method::POST,
        &format!("{service}/deployments?commit={first}"),
        Some(&owner),
        None,
    )
    .await
    .assert_problem(422, "invalid_request");
}

/// Code from a repository is placed only on providers that build it: with only gcp allowed,
/// the deployment waits, saying why, and fails at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_from_a_repository_is_never_placed_where_it_cannot_be_built() {
    let s = TestServer::start(Backend::Sqlite).await.unwrap();
    let (platform, _platform_dir) = platform(&s).await;
    let made = s
        .project_with_service_of(
            "cloudy",
            json!({
                "name": "web",
                "source": { "type": "git", "repository": "https://example.com/web.git", "command": ["./web"] },
                "port": 8080,
                "placement": { "providers": [{ "name": "gcp" }] },
                "health_check": { "start_timeout_secs": 2 },
            }),
        )
        .await;
    let service = format!("/v1/projects/{}/services/{}", made.id, made.service);
    let made = s
        .call(
            Method::POST,
            &format!("{service}/deployments?commit={}", "a".repeat(40)),
            Some(&made.owner),
            None,
        )
        .await;
    let said = failure_said(&s, &service, made.assert_status(201)).await;
    assert!(said.contains("git-source"), "{said}");
    assert!(
        platform
            .gcp
            .instance_metadata("bulkhead-artifact")
            .is_empty(),
        "gcp was never asked"
    );
}
