//! The `bulkhead` binary: first start prints the bound address and a generated token once,
//! settings precedence (flag > environment > file), `migrate`, and shutdown on SIGTERM.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_bulkhead");

/// A copy of the binary that workloads may run: as root, the agent runs each workload as a
/// user of its own, who cannot reach a checkout under a private home directory.
fn workload_binary() -> &'static Path {
    static COPY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("bulkhead-workload-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = dir.join("bulkhead");
        std::fs::copy(BIN, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        copy
    })
}

fn bulkhead(dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .current_dir(dir)
        .env_remove("BULKHEAD_BOOTSTRAP_TOKEN")
        .env_remove("BULKHEAD_DATA_DIR")
        .env("RUST_LOG", "warn");
    command
}

/// Starts `serve` and reads stdout up to the "listening" line: (child, address, lines before).
/// The caller waits for the child, in [`terminate`].
#[allow(clippy::zombie_processes)]
fn serve(mut command: Command) -> (Child, String, Vec<String>) {
    let mut child = command
        .arg("--listen")
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut before = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            let status = child.wait().unwrap();
            panic!("bulkhead exited ({status}) before listening: {before:?}");
        }
        if let Some(addr) = line.trim().strip_prefix("bulkhead listening on http://") {
            // Keep reading what it prints later, so that its writes never meet a closed pipe.
            std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
            return (child, addr.to_owned(), before);
        }
        before.push(line.trim().to_owned());
    }
}

fn terminate(mut child: Child) {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit after SIGTERM: {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().ok();
    panic!("bulkhead did not stop within 10 s of SIGTERM");
}

async fn get(addr: &str, path: &str, token: Option<&str>) -> reqwest::StatusCode {
    let mut request = crate::support::http().get(format!("http://{addr}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().status()
}

/// The names of the server's providers, in name order.
async fn provider_names(addr: &str, token: &str) -> Vec<String> {
    let providers: serde_json::Value = crate::support::http()
        .get(format!("http://{addr}/v1/providers?limit=100"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut names: Vec<String> = providers["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{providers}"))
        .iter()
        .map(|provider| provider["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn first_start_prints_address_and_token_once() {
    let dir = tempfile::tempdir().unwrap();
    let (child, addr, before) = serve({
        let mut c = bulkhead(dir.path());
        c.arg("serve");
        c
    });
    let token = before
        .iter()
        .find(|line| line.starts_with("bh_"))
        .expect("the generated token is printed")
        .clone();
    assert_eq!(get(&addr, "/healthz", None).await, 200);
    assert_eq!(get(&addr, "/v1/users", Some(&token)).await, 200);
    assert_eq!(
        provider_names(&addr, &token).await,
        ["aws", "gcp", "metal"],
        "the real providers only: no demo takes real placements"
    );
    assert!(
        dir.path().join("data/bulkhead.db").exists(),
        "SQLite in the default data directory"
    );
    terminate(child);

    let (child, addr, before) = serve({
        let mut c = bulkhead(dir.path());
        c.arg("serve");
        c
    });
    assert!(
        before.iter().all(|line| !line.contains(&token)),
        "the token is printed only once"
    );
    assert_eq!(
        get(&addr, "/v1/users", Some(&token)).await,
        200,
        "the token still works after a restart"
    );
    terminate(child);
}

#[tokio::test]
async fn settings_precedence_is_flag_then_environment_then_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bulkhead.toml"),
        "data_dir = \"from-file\"\nbody_limit_bytes = 1024\n",
    )
    .unwrap();
    let run = |env: Option<&str>, flag: Option<&str>| {
        let mut c = bulkhead(dir.path());
        c.args(["serve", "--config", "bulkhead.toml"])
            .env("BULKHEAD_BOOTSTRAP_TOKEN", "precedence-test-token-0001");
        if let Some(env) = env {
            c.env("BULKHEAD_DATA_DIR", env);
        }
        if let Some(flag) = flag {
            c.args(["--data-dir", flag]);
        }
        c
    };
    for (env, flag, expected) in [
        (None, None, "from-file"),
        (Some("from-env"), None, "from-env"),
        (Some("from-env"), Some("from-flag"), "from-flag"),
    ] {
        let (child, addr, _) = serve(run(env, flag));
        assert!(
            dir.path().join(expected).join("bulkhead.db").exists(),
            "expected the database in {expected}"
        );
        // The file's body limit applies (1 KiB).
        let big = serde_json::json!({ "name": "x".repeat(2000) });
        let client = crate::support::http();
        let reply = client
            .post(format!("http://{addr}/v1/projects"))
            .bearer_auth("precedence-test-token-0001")
            .json(&big)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 413);
        terminate(child);
    }
    let bad = bulkhead(dir.path())
        .args(["serve", "--config", "missing.toml"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing.toml"));
}

#[tokio::test]
async fn migrate_up_down_status() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let output = bulkhead(dir.path())
            .arg("migrate")
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "migrate {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    run(&["up"]);
    let status = run(&["status"]);
    let total =
        <bulkhead_migrations::Migrator as bulkhead_migrations::MigratorTrait>::migrations().len();
    assert_eq!(status.matches("Applied").count(), total, "{status}");
    run(&["down", "2"]);
    let status = run(&["status"]);
    assert_eq!(status.matches("Pending").count(), 2, "{status}");
}

/// `bulkhead dev`, the README's run command: one instance on each provider, each answering
/// over HTTP; stopping it stops the agent's workloads.
#[tokio::test]
async fn dev_runs_a_complete_local_platform() {
    let dir = tempfile::tempdir().unwrap();
    let token = "dev-platform-test-token-0001";
    // A data directory made by hand (or an earlier version) with the usual 0755 is made
    // 0711: it holds the master key and the database; only the agent's workloads pass through.
    let data_dir = dir.path().join("data/dev");
    std::fs::create_dir_all(&data_dir).unwrap();
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (child, addr, _) = serve({
        let mut c = bulkhead(dir.path());
        c.arg("dev").env("BULKHEAD_BOOTSTRAP_TOKEN", token);
        c
    });
    assert_eq!(
        provider_names(&addr, token).await,
        ["aws", "gcp", "metal"],
        "a default placement lands on the simulated clouds and the agent, never on a demo"
    );
    assert_eq!(
        std::fs::metadata(&data_dir).unwrap().permissions().mode() & 0o777,
        0o711
    );
    let client = crate::support::http();
    let hello = format!("{} hello", workload_binary().display());
    let mut workload_address = String::new();
    for (provider, region, artifact) in [
        ("gcp", bulkhead::dev::GCP_ZONE, "shop/web:1"),
        ("aws", bulkhead::dev::AWS_REGION, "ami-0bulkhead"),
        ("metal", "local", hello.as_str()),
    ] {
        let made: serde_json::Value = client
            .post(format!("http://{addr}/v1/providers/{provider}/instances"))
            .bearer_auth(token)
            .json(&serde_json::json!({ "instance_key": "web-1", "region": region, "artifact": artifact, "port": 8080 }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let address = made["address"]
            .as_str()
            .unwrap_or_else(|| panic!("{provider}: {made}"))
            .to_owned();
        let mut answer = Err(String::new());
        for _ in 0..100 {
            answer = match crate::support::get(format!("http://{address}/")).await {
                Ok(response) => Ok(response.text().await.unwrap()),
                Err(err) => Err(err.to_string()),
            };
            if answer.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let answer =
            answer.unwrap_or_else(|err| panic!("{provider}'s instance at {address}: {err}"));
        assert!(answer.contains("\"instance\""), "{provider}: {answer}");
        if provider == "metal" {
            assert!(
                answer.contains("web-1"),
                "the workload knows its key: {answer}"
            );
            workload_address = address;
        }
    }
    terminate(child);
    assert!(
        crate::support::get(format!("http://{workload_address}/"))
            .await
            .is_err(),
        "stopping `bulkhead dev` stops the agent's workloads"
    );
}

/// `bulkhead agent` takes its token from a private file only (not from the environment), and,
/// as root, says that each workload runs as a user of its own.
#[tokio::test]
async fn agent_reads_its_token_from_a_private_file() {
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "this test needs root: `bulkhead agent` refuses to start otherwise, since only root can \
         run workloads as users of their own (run the tests as root, as CI does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("agent-token");
    let token = "cli-agent-test-token-0001";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let agent = || {
        let mut command = bulkhead(dir.path());
        command
            .env_remove("BULKHEAD_AGENT_TOKEN")
            .args(["agent", "--data-dir", "agent", "--listen", "127.0.0.1:0"])
            .arg("--token-file")
            .arg(&token_file)
            // Not the default range: `bulkhead dev` platforms of other tests take blocks of it.
            .args(["--workload-uids", "61100-61131"]);
        command
    };
    let refused = |mut command: Command, expected: &str| {
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "started: {stderr}");
        assert!(stderr.contains(expected), "`{expected}` in: {stderr}");
    };

    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    refused(agent(), "chmod 600");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut with_env_token = agent();
    with_env_token.env("BULKHEAD_AGENT_TOKEN", token);
    refused(with_env_token, "--token-file");

    let mut child = KillOnDrop(Some(
        agent()
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let stdout = child.0.as_mut().and_then(|child| child.stdout.take());
    let mut lines = BufReader::new(stdout.unwrap()).lines();
    let mut next_line = || lines.next().expect("a line").unwrap();
    let listening = next_line();
    let addr = listening
        .strip_prefix("bulkhead agent listening on http://")
        .unwrap_or_else(|| panic!("{listening}"))
        .to_owned();
    let workloads = next_line();
    assert!(
        workloads.starts_with(
            "workloads: each workload runs as a user of its own (uids 61100-61131); each \
             workload has a network namespace of its own (10.77.0.0/16), reachable only on its \
             port; each workload is held to its size by a cgroup of its own (v"
        ),
        "as root, on a machine with ip, nft and cgroups (CI installs them): {workloads}"
    );
    let cpus = std::thread::available_parallelism().unwrap().get();
    let sizes = next_line();
    assert!(
        sizes.starts_with(&format!(
            "workloads' sizes may add up to {}m CPU and ",
            cpus * 1000
        )) && sizes.ends_with(" MiB"),
        "this machine's CPUs and memory: {sizes}"
    );
    assert_eq!(get(&addr, "/v1/capacity", Some(token)).await, 200);
    assert_eq!(
        get(&addr, "/v1/capacity", Some("not-the-token-at-all")).await,
        401
    );
    terminate(child.0.take().unwrap());
}

/// Kills its child when dropped, so that a test that fails leaves no agent behind holding its
/// uids (the next run could not start one on them).
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
