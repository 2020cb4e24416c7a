//! Workloads built from a repository: a real `git daemon` serving a repository made by the
//! test, the agent fetching commits from it, checking them out and building them as the
//! workload's user, and the failures a user meets (a commit the server does not have, a server
//! that does not answer, a build that fails) each with its reason.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Client, HTTP_SERVER, require_python, start_agent, uid_of};

/// A repository with commits made by the test, served by `git daemon` on loopback (killed when
/// dropped).
pub struct GitServer {
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
    pub fn start() -> Self {
        let base = tempfile::tempdir().unwrap();
        git(base.path(), &["init", "--quiet", "-b", "main", "web"]);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
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

    pub fn url(&self) -> String {
        format!("git://127.0.0.1:{}/web", self.port)
    }

    /// Commits `files` (name, content) on `main`; the new commit's id.
    pub fn commit(&self, files: &[(&str, &str)]) -> String {
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

/// A workload serving its directory (the checked-out code) over HTTP, built from `commit`.
async fn put_built(
    client: &Client,
    key: &str,
    url: &str,
    commit: &str,
    build: Option<&str>,
) -> (StatusCode, Value) {
    let mut source = json!({"url": url, "commit": commit});
    if let Some(build) = build {
        source["build"] = json!(build);
    }
    client
        .call(
            reqwest::Method::PUT,
            &format!("/v1/workloads/{key}"),
            Some(json!({"command": HTTP_SERVER, "port": 8080, "source": source})),
        )
        .await
}

/// A file the workload serves, once it answers.
async fn served(view: &Value, path: &str) -> String {
    let address = view["address"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(response) = reqwest::get(format!("http://{address}/{path}")).await
            && response.status().is_success()
        {
            return response.text().await.unwrap();
        }
        assert!(Instant::now() < deadline, "{path} never served by {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn log_text(client: &Client, key: &str) -> String {
    let (status, page) = client
        .get(&format!("/v1/workloads/{key}/logs?limit=1000"))
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["text"].as_str().unwrap().to_owned() + "\n")
        .collect()
}

#[tokio::test]
async fn a_commit_is_fetched_once_checked_out_and_built_as_the_workload() {
    require_python();
    let repo = GitServer::start();
    let first = repo.commit(&[("version.txt", "one\n")]);
    let second = repo.commit(&[("version.txt", "two\n")]);
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 8).await;
    let client = Client::new(&agent);
    let build = "sh -c 'cat version.txt > built.txt && id -u > uid.txt && echo built on $PORT'";

    let (status, made) = put_built(&client, "web-one", &repo.url(), &first, Some(build)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["state"], "preparing", "{made}");
    assert_eq!(made["source"]["commit"], first);
    assert_eq!(made["source"]["url"], repo.url());
    let view = client
        .wait_for("web-one", "built and running", |view| {
            view["state"] == "running"
        })
        .await;
    assert_eq!(served(&view, "built.txt").await, "one\n");
    assert_eq!(
        served(&view, "uid.txt").await.trim(),
        uid_of(&view).to_string(),
        "the build runs as the workload's user"
    );
    let log = log_text(&client, "web-one").await;
    for said in [
        format!("fetching commit {first} from {}", repo.url()),
        "fetched in".into(),
        format!("building: `{build}`"),
        "built on ".into(),
        "built in".into(),
    ] {
        assert!(log.contains(&said), "{said:?} in the log:\n{log}");
    }
    // The checkout is the workload's, the cache the agent's.
    let app = dir.path().join("workloads/web-one/app");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(app.join("version.txt")).unwrap()),
        uid_of(&view)
    );

    // Another commit of the same repository; the first one again comes from the cache.
    let (status, _) = put_built(&client, "web-two", &repo.url(), &second, Some(build)).await;
    assert_eq!(status, StatusCode::CREATED);
    let view = client
        .wait_for("web-two", "running", |view| view["state"] == "running")
        .await;
    assert_eq!(served(&view, "built.txt").await, "two\n");
    let (status, _) = put_built(&client, "web-again", &repo.url(), &first, None).await;
    assert_eq!(status, StatusCode::CREATED);
    let view = client
        .wait_for("web-again", "running", |view| view["state"] == "running")
        .await;
    assert_eq!(served(&view, "version.txt").await, "one\n");
    assert!(
        log_text(&client, "web-again")
            .await
            .contains("the commit is on this machine already")
    );

    // A restart runs the command again, without fetching or building.
    let pid = view["pid"].as_u64().unwrap() as u32;
    super::kill(pid);
    let view = client
        .wait_for("web-again", "restarted", |view| {
            view["restarts"] == 1 && view["state"] == "running"
        })
        .await;
    assert_eq!(served(&view, "version.txt").await, "one\n");
    assert_eq!(
        log_text(&client, "web-again")
            .await
            .matches("fetching commit")
            .count(),
        1
    );

    // The repository's cache goes with the last workload that uses it.
    let sources = dir.path().join("sources");
    assert_eq!(std::fs::read_dir(&sources).unwrap().count(), 1);
    for key in ["web-one", "web-two"] {
        assert_eq!(client.delete(key).await, StatusCode::NO_CONTENT);
        assert_eq!(std::fs::read_dir(&sources).unwrap().count(), 1);
    }
    assert_eq!(client.delete("web-again").await, StatusCode::NO_CONTENT);
    assert_eq!(std::fs::read_dir(&sources).unwrap().count(), 0);
    assert!(!app.exists());
}

#[tokio::test]
async fn a_missing_commit_an_unreachable_server_and_a_failed_build_each_say_why() {
    let repo = GitServer::start();
    let commit = repo.commit(&[("version.txt", "one\n")]);
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 8).await;
    let client = Client::new(&agent);
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let cases = [
        (
            "missing",
            repo.url(),
            missing.to_owned(),
            None,
            "not our ref",
        ),
        (
            "unreachable",
            format!("git://127.0.0.1:{closed}/web"),
            commit.clone(),
            None,
            "fetching",
        ),
        (
            "no-build",
            repo.url(),
            commit.clone(),
            Some("sh -c 'echo compiling; exit 3'"),
            "the build `sh -c 'echo compiling; exit 3'` failed: exited with status 3",
        ),
        (
            "no-program",
            repo.url(),
            commit.clone(),
            Some("no-such-builder --all"),
            "could not start the build `no-such-builder --all`",
        ),
    ];
    for (key, url, commit, build, reason) in cases {
        let (status, made) = put_built(&client, key, &url, &commit, build).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        let view = client
            .wait_for(key, "failed", |view| view["state"] == "failed")
            .await;
        let said = view["last_exit"].as_str().unwrap();
        assert!(said.contains(reason), "{key}: {reason:?} in {said:?}");
        assert!(view["pid"].is_null(), "{view}");
        assert!(
            log_text(&client, key).await.contains(reason),
            "{key}: the reason is in the log"
        );
    }
    assert!(log_text(&client, "no-build").await.contains("compiling"));

    // What git is never asked to fetch.
    for (url, token, why) in [
        ("file:///etc", None, "must start with"),
        ("ext::git-upload-pack", None, "must start with"),
        ("ext::sh -c id", None, "spaces"),
        (
            "https://user:secret@example.com/web",
            None,
            "user or password",
        ),
        (
            "http://example.com/web",
            Some("read-token"),
            "only sent over `https`",
        ),
    ] {
        let mut source = json!({"url": url, "commit": commit});
        if let Some(token) = token {
            source["token"] = json!(token);
        }
        let (status, problem) = client
            .call(
                reqwest::Method::PUT,
                "/v1/workloads/refused",
                Some(json!({"command": HTTP_SERVER, "source": source})),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains(why),
            "{url}: {problem}"
        );
        assert!(!problem.to_string().contains("secret"), "{problem}");
    }
}
