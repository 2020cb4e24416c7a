//! The agent end to end: real processes (`python3 -m http.server`, `sleep`), real HTTP.

use std::path::Path;
use std::time::{Duration, Instant};

use bulkhead_agent::{AgentSettings, RunningAgent};
use reqwest::StatusCode;
use serde_json::{Value, json};

const TOKEN: &str = "agent-test-token-0001";
/// `$PORT` is replaced by the agent (there is no shell): `http.server` takes its port as an
/// argument, not from the environment.
const HTTP_SERVER: &str = "python3 -m http.server $PORT";

fn require_python() {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        found,
        "these tests run `python3 -m http.server`: python3 was not found (apt-get install python3)"
    );
}

async fn start_agent(data_dir: &Path, slots: u32) -> RunningAgent {
    let mut settings = AgentSettings::new("127.0.0.1:0".parse().unwrap(), data_dir.into(), TOKEN);
    settings.slots = slots;
    bulkhead_agent::start(settings)
        .await
        .expect("the agent starts")
}

/// Calls an agent's API. Every process group it sees a workload run in is killed when it is
/// dropped, so that a failing test leaves no process behind.
struct Client {
    http: reqwest::Client,
    base: String,
    seen: std::sync::Mutex<Vec<u32>>,
}

impl Drop for Client {
    fn drop(&mut self) {
        for pid in self.seen.lock().unwrap().drain(..) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Client {
    fn new(agent: &RunningAgent) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .build()
                .unwrap(),
            base: agent.url(),
            seen: std::sync::Mutex::new(Vec::new()),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the agent answers");
        let status = response.status();
        let text = response.text().await.unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON from {path}: {text}"))
        };
        if let Some(pid) = value["pid"].as_u64() {
            self.seen.lock().unwrap().push(pid as u32);
        }
        (status, value)
    }

    async fn put(&self, key: &str, command: &str) -> (StatusCode, Value) {
        let body = json!({"command": command, "env": {"GREETING": "hello"}, "port": 8080});
        self.call(
            reqwest::Method::PUT,
            &format!("/v1/workloads/{key}"),
            Some(body),
        )
        .await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn delete(&self, key: &str) -> StatusCode {
        self.call(
            reqwest::Method::DELETE,
            &format!("/v1/workloads/{key}"),
            None,
        )
        .await
        .0
    }

    async fn workload(&self, key: &str) -> Value {
        let (status, view) = self.get(&format!("/v1/workloads/{key}")).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        view
    }

    /// Waits until the workload's view passes `check`; fails with the last view.
    async fn wait_for(&self, key: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(12);
        loop {
            let view = self.workload(key).await;
            if check(&view) {
                return view;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: never happened; last view {view}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn running_and_healthy(view: &Value) -> bool {
    view["state"] == "running" && view["healthy"] == true
}

fn pid_of(view: &Value) -> u32 {
    view["pid"].as_u64().expect("a pid") as u32
}

/// Whether `pid` runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

/// The live processes of process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // fields[0] is the state (field 3), fields[2] the process group (field 5).
        if fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str()) {
            members.push(pid);
        }
    }
    members
}

async fn wait_dead(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(12);
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /` on the workload's address.
async fn answers(address: &str) -> bool {
    reqwest::Client::new()
        .get(format!("http://{address}/"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .is_ok_and(|response| response.status().is_success())
}

fn kill(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL).expect("SIGKILL");
}

#[tokio::test]
async fn a_workload_runs_answers_and_is_restarted_when_killed() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 16).await;
    let client = Client::new(&agent);

    let (status, created) = client.put("web", HTTP_SERVER).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["key"], "web");
    assert_eq!(created["command"], HTTP_SERVER);
    assert_eq!(created["port"], 8080);
    assert_eq!(created["restarts"], 0);
    assert!(created.get("env").is_none(), "the environment is not shown");
    let address = created["address"].as_str().unwrap().to_owned();
    assert!(address.starts_with("127.0.0.1:"), "{address}");
    assert_ne!(address, "127.0.0.1:8080", "the agent assigns the host port");

    let view = client
        .wait_for("web", "running and healthy", running_and_healthy)
        .await;
    let first_pid = pid_of(&view);
    assert_eq!(first_pid, pid_of(&created));
    assert!(answers(&address).await, "the workload answers on {address}");

    // Idempotent: the same key returns the same workload, no second process.
    let (status, again) = client.put("web", "python3 -m http.server 9999").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pid_of(&again), first_pid);
    assert_eq!(again["command"], HTTP_SERVER);
    let (_, list) = client.get("/v1/workloads").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    kill(first_pid);
    let view = client
        .wait_for("web", "restarted after SIGKILL", |view| {
            view["restarts"] == 1
                && view["pid"]
                    .as_u64()
                    .is_some_and(|pid| pid as u32 != first_pid)
                && running_and_healthy(view)
        })
        .await;
    assert_eq!(view["last_exit"], "killed by signal 9 (SIGKILL)");
    assert_eq!(view["address"], address.as_str(), "the address is kept");
    assert!(answers(&address).await);

    let (status, logs) = client.get("/v1/workloads/web/logs").await;
    assert_eq!(status, StatusCode::OK);
    let lines: Vec<&str> = logs["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line.as_str().unwrap())
        .collect();
    assert!(
        lines.iter().any(|line| line.contains("killed by signal 9")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|line| line.contains("\"GET / HTTP/1.1\"")),
        "python's own output: {lines:?}"
    );

    let second_pid = pid_of(&view);
    agent.shutdown_and_stop_workloads().await;
    wait_dead(second_pid).await;
}

#[tokio::test]
async fn a_restarted_agent_re_adopts_its_workloads() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 16).await;
    let client = Client::new(&agent);
    assert_eq!(client.put("site", HTTP_SERVER).await.0, StatusCode::CREATED);
    let view = client
        .wait_for("site", "running and healthy", running_and_healthy)
        .await;
    let pid = pid_of(&view);
    let address = view["address"].as_str().unwrap().to_owned();

    // A second agent cannot take the same data directory.
    let mut settings = AgentSettings::new("127.0.0.1:0".parse().unwrap(), dir.path().into(), TOKEN);
    settings.slots = 4;
    let err = bulkhead_agent::start(settings)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("another agent"), "{err:#}");

    agent.shutdown().await;
    assert!(
        alive(pid),
        "shutting the agent down leaves its workloads running"
    );
    assert!(answers(&address).await);
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("agent-state.json")).unwrap())
            .unwrap();
    assert_eq!(state["workloads"][0]["pid"], pid);

    let agent = start_agent(dir.path(), 16).await;
    let client = Client::new(&agent);
    let view = client
        .wait_for("site", "adopted and healthy", running_and_healthy)
        .await;
    assert_eq!(pid_of(&view), pid, "the same process, adopted");
    assert_eq!(view["adopted"], true);
    assert_eq!(view["address"], address.as_str());
    assert!(answers(&address).await);

    // An adopted process is watched by polling: killed, it is started again.
    kill(pid);
    let view = client
        .wait_for("site", "restarted after the adopted process died", |view| {
            view["restarts"] == 1
                && view["pid"].as_u64().is_some_and(|new| new as u32 != pid)
                && running_and_healthy(view)
        })
        .await;
    assert_eq!(view["adopted"], false);
    assert!(answers(&address).await);

    let new_pid = pid_of(&view);
    agent.shutdown_and_stop_workloads().await;
    wait_dead(new_pid).await;
}

#[tokio::test]
async fn every_route_but_healthz_needs_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 16).await;
    let http = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", agent.url());

    let health = http.get(url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);

    for request in [
        http.get(url("/v1/capacity")),
        http.get(url("/v1/workloads")),
        http.get(url("/v1/capacity"))
            .bearer_auth("not-the-agent-token-at-all"),
        http.get(url("/v1/capacity")).header("authorization", TOKEN),
        http.put(url("/v1/workloads/x"))
            .bearer_auth("wrong")
            .json(&json!({"command": "sleep 60"})),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "unauthorized");
        assert_eq!(problem["status"], 401);
        assert_eq!(problem["title"], "Unauthorized");
        assert_eq!(problem["type"], "about:blank");
    }
    assert!(
        Client::new(&agent).get("/v1/workloads").await.1["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    agent.shutdown_and_stop_workloads().await;
}

#[tokio::test]
async fn capacity_is_counted_and_delete_stops_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 2).await;
    let client = Client::new(&agent);

    assert_eq!(
        client.get("/v1/capacity").await.1,
        json!({"slots_total": 2, "slots_used": 0, "slots_free": 2})
    );
    // `a` ignores SIGTERM, and so does its child (ignored signals are inherited).
    let (status, a) = client
        .put("a", "sh -c 'trap \"\" TERM; sleep 300 & wait'")
        .await;
    assert_eq!(status, StatusCode::CREATED, "{a}");
    assert_eq!(client.put("b", "sleep 300").await.0, StatusCode::CREATED);
    assert_eq!(
        client.get("/v1/capacity").await.1,
        json!({"slots_total": 2, "slots_used": 2, "slots_free": 0})
    );
    let (status, problem) = client.put("c", "sleep 300").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["code"], "capacity_exhausted");
    // An existing key is still answered when full.
    assert_eq!(client.put("a", "sleep 300").await.0, StatusCode::OK);

    let a_pid = pid_of(&a);
    let deadline = Instant::now() + Duration::from_secs(5);
    while group_members(a_pid).len() < 2 {
        assert!(Instant::now() < deadline, "sh and its sleep never both ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = Instant::now();
    assert_eq!(client.delete("a").await, StatusCode::NO_CONTENT);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(4),
        "SIGKILL came after the grace period ({took:?})"
    );
    assert!(
        group_members(a_pid).is_empty(),
        "the whole group was killed"
    );
    assert_eq!(
        client.delete("a").await,
        StatusCode::NO_CONTENT,
        "deleting again is fine"
    );
    let (status, problem) = client.get("/v1/workloads/a").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(problem["code"], "not_found");
    assert_eq!(client.get("/v1/capacity").await.1["slots_free"], 1);

    // A well-behaved process stops at SIGTERM, at once.
    let b_pid = pid_of(&client.workload("b").await);
    let started = Instant::now();
    assert_eq!(client.delete("b").await, StatusCode::NO_CONTENT);
    assert!(started.elapsed() < Duration::from_secs(3));
    wait_dead(b_pid).await;
    assert_eq!(client.put("c", "sleep 300").await.0, StatusCode::CREATED);
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("agent-state.json")).unwrap())
            .unwrap();
    let keys: Vec<&str> = state["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["c"]);

    let c_pid = pid_of(&client.workload("c").await);
    agent.shutdown_and_stop_workloads().await;
    wait_dead(c_pid).await;
}

#[tokio::test]
async fn bad_requests_are_problems_and_a_missing_program_fails() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 4).await;
    let client = Client::new(&agent);

    let (status, problem) = client.put("Not_A_Key", "sleep 1").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["code"], "invalid_key");
    let (status, problem) = client.put("q", "echo 'unclosed").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["code"], "invalid_workload");
    let (status, problem) = client
        .call(
            reqwest::Method::PUT,
            "/v1/workloads/q",
            Some(json!({"cmd": "sleep 1"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["code"], "invalid_body");
    assert_eq!(client.get("/v1/capacity").await.1["slots_used"], 0);

    // The environment: the workload's variables and PORT, not the agent's.
    let (status, env_view) = client
        .put(
            "env",
            "sh -c 'echo \"greeting=$GREETING port=$PORT\"; sleep 300'",
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let port = env_view["address"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, logs) = client.get("/v1/workloads/env/logs").await;
        let expected = format!("greeting=hello port={port}");
        if logs["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|line| line == &json!(expected))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never printed {expected}: {logs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (status, view) = client.put("ghost", "no-such-program-anywhere --flag").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(view["state"], "failed");
    assert!(view["pid"].is_null());
    assert!(
        view["last_exit"]
            .as_str()
            .unwrap()
            .contains("could not start"),
        "{view}"
    );
    assert_eq!(client.delete("ghost").await, StatusCode::NO_CONTENT);

    let env_pid = pid_of(&env_view);
    agent.shutdown_and_stop_workloads().await;
    wait_dead(env_pid).await;
}
