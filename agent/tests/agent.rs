//! The agent end to end: real processes (`python3 -m http.server`, `sleep`), real HTTP, each
//! workload running as a user of its own in a network namespace of its own (the tests run as
//! root, as the fleet's agents do). `network` tests what a namespace lets through, `limits` what
//! a workload's cgroup holds it to.

mod limits;
mod network;
mod source;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bulkhead_agent::{AgentSettings, Isolation, RunningAgent, UidRange};
use reqwest::StatusCode;
use serde_json::{Value, json};

const TOKEN: &str = "agent-test-token-0001";
/// `$PORT` is replaced by the agent (there is no shell): `http.server` takes its port as an
/// argument, not from the environment.
const HTTP_SERVER: &str = "python3 -m http.server $PORT";

fn require_python() {
    use std::os::unix::process::CommandExt;
    require_root();
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        found,
        "these tests run `python3 -m http.server`: python3 was not found (apt-get install python3)"
    );
    // The workloads run as users of their own, who need a python3 they can run.
    let runnable = std::process::Command::new("python3")
        .arg("--version")
        .uid(61999)
        .gid(61999)
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        runnable,
        "these tests run `python3` as users other than root, and the python3 on PATH cannot be \
         run by them (is it under /root?): install one that every user can run, such as \
         /usr/bin/python3 (apt-get install python3)"
    );
}

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "these tests need root: the agent runs each workload as a user of its own, which only \
         root can do (run the tests as root, as CI does)"
    );
}

fn settings(data_dir: &Path, slots: u32) -> AgentSettings {
    let mut settings = AgentSettings::new("127.0.0.1:0".parse().unwrap(), data_dir.into(), TOKEN);
    settings.slots = slots;
    // Room for every slot at up to 1000m and 1 GiB, whatever the test machine has: these
    // tests are about what runs, not where it fits (`limits` tests the room).
    settings.cpu_millis = Some(slots * 1000);
    settings.memory_mib = Some(slots * 1024);
    settings
}

/// An agent whose workloads run as users of their own: uids of a block that no other agent
/// holds (the tests run in parallel, and agents never share uids), out of [`shared_uids`].
async fn start_agent(data_dir: &Path, slots: u32) -> RunningAgent {
    require_root();
    let mut settings = settings(data_dir, slots);
    settings.workload_uids = shared_uids();
    let agent = bulkhead_agent::start_in_free_uids(settings)
        .await
        .expect("the agent starts");
    uids_of(&agent);
    agent
}

/// The uids the agents of most tests take their blocks from.
fn shared_uids() -> UidRange {
    UidRange::new(60600, 60999).unwrap()
}

/// An agent on uids of its test's own, which it takes again when restarted: a block out of
/// [`shared_uids`], so that no other test's agent takes it while this one restarts.
async fn start_agent_on(data_dir: &Path, slots: u32, first_uid: u32) -> RunningAgent {
    require_root();
    let uids = UidRange::new(first_uid, first_uid + slots - 1).unwrap();
    assert!(!shared_uids().contains(uids.first()));
    restart_agent(data_dir, slots, uids).await
}

/// An agent on the uids `uids` (an agent restarting on the same data directory keeps them).
async fn restart_agent(data_dir: &Path, slots: u32, uids: UidRange) -> RunningAgent {
    let mut settings = settings(data_dir, slots);
    settings.workload_uids = uids;
    bulkhead_agent::start(settings)
        .await
        .expect("the agent starts")
}

fn uids_of(agent: &RunningAgent) -> UidRange {
    match agent.isolation {
        Isolation::UserPerWorkload(uids) => uids,
        Isolation::SameUser => panic!("the agent runs workloads as its own user, as root"),
    }
}

fn uid_of(view: &Value) -> u32 {
    view["uid"].as_u64().expect("a uid") as u32
}

/// The real uid of process `pid`.
fn proc_uid(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("Uid:"))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
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
            http: http_builder()
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
    http()
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
    let of_stream =
        |stream: &str, text: &str| {
            logs["lines"].as_array().unwrap().iter().any(|line| {
                line["stream"] == stream && line["text"].as_str().unwrap().contains(text)
            })
        };
    assert!(of_stream("system", "killed by signal 9"), "{logs}");
    // python's own output, on its stderr.
    assert!(of_stream("stderr", "\"GET / HTTP/1.1\""), "{logs}");
    let seqs: Vec<u64> = logs["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "{seqs:?}"
    );
    assert_eq!(logs["next"], json!(seqs.last().unwrap()));

    // Following: a reader waiting after the last line gets the next one as it is printed.
    let next = logs["next"].as_u64().unwrap();
    let started = Instant::now();
    let following = format!("/v1/workloads/web/logs?after={next}&wait_ms=10000");
    let follow = client.get(&following);
    let request = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(answers(&address).await);
    };
    let ((status, followed), ()) = tokio::join!(follow, request);
    assert_eq!(status, StatusCode::OK);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let first = &followed["lines"][0];
    assert_eq!(first["seq"], json!(next + 1), "{followed}");
    assert!(
        first["text"].as_str().unwrap().contains("GET /"),
        "{followed}"
    );
    let (status, bad) = client.get("/v1/workloads/web/logs?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    let (status, bad) = client.get("/v1/workloads/web/logs?after=-1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");

    let second_pid = pid_of(&view);
    agent.shutdown_and_stop_workloads().await;
    wait_dead(second_pid).await;
}

#[tokio::test]
async fn a_restarted_agent_re_adopts_its_workloads_under_their_uids() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent_on(dir.path(), 16, 61000).await;
    let uids = uids_of(&agent);
    let client = Client::new(&agent);
    assert_eq!(client.put("site", HTTP_SERVER).await.0, StatusCode::CREATED);
    assert_eq!(client.put("idle", "sleep 300").await.0, StatusCode::CREATED);
    let view = client
        .wait_for("site", "running and healthy", running_and_healthy)
        .await;
    let pid = pid_of(&view);
    let address = view["address"].as_str().unwrap().to_owned();
    let idle = client.workload("idle").await;
    let (site_uid, idle_uid) = (uid_of(&view), uid_of(&idle));
    assert_ne!(site_uid, idle_uid, "one uid per workload");
    assert!(uids.contains(site_uid) && uids.contains(idle_uid));
    assert_eq!(proc_uid(pid), site_uid);
    assert_eq!(proc_uid(pid_of(&idle)), idle_uid);

    // A second agent can take neither the same data directory nor the same uids.
    let err = bulkhead_agent::start(settings(dir.path(), 4))
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("another agent"), "{err:#}");
    let other = tempfile::tempdir().unwrap();
    let mut same_uids = settings(other.path(), 4);
    same_uids.workload_uids = uids;
    let err = bulkhead_agent::start(same_uids)
        .await
        .err()
        .expect("refused");
    assert!(err.is::<bulkhead_agent::UidsTaken>(), "{err:#}");

    agent.shutdown().await;
    assert!(
        alive(pid),
        "shutting the agent down leaves its workloads running"
    );
    assert!(answers(&address).await);
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("agent-state.json")).unwrap())
            .unwrap();
    let stored = |key: &str| {
        state["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["key"] == key)
            .unwrap()
            .clone()
    };
    assert_eq!(stored("site")["pid"], pid);
    assert_eq!(stored("site")["uid"], site_uid);
    assert_eq!(stored("idle")["uid"], idle_uid);

    let agent = restart_agent(dir.path(), 16, uids).await;
    let client = Client::new(&agent);
    let view = client
        .wait_for("site", "adopted and healthy", running_and_healthy)
        .await;
    assert_eq!(pid_of(&view), pid, "the same process, adopted");
    assert_eq!(view["adopted"], true);
    let in_namespace = |pid: u32| {
        let identity = |path: String| {
            let metadata = std::fs::metadata(path).unwrap();
            (metadata.dev(), metadata.ino())
        };
        identity(format!("/proc/{pid}/ns/net"))
            == identity(format!("/run/netns/bulkhead-{site_uid}"))
    };
    assert!(in_namespace(pid), "still in its network namespace");
    assert_eq!(view["address"], address.as_str());
    assert_eq!(uid_of(&view), site_uid, "the same uid");
    let idle = client.workload("idle").await;
    assert_eq!(idle["adopted"], true);
    assert_eq!(uid_of(&idle), idle_uid);
    assert!(answers(&address).await);

    // An adopted process is watched by polling: killed, it is started again, as its uid.
    kill(pid);
    let view = client
        .wait_for("site", "restarted after the adopted process died", |view| {
            view["restarts"] == 1
                && view["pid"].as_u64().is_some_and(|new| new as u32 != pid)
                && running_and_healthy(view)
        })
        .await;
    assert_eq!(view["adopted"], false);
    assert_eq!(uid_of(&view), site_uid);
    let new_pid = pid_of(&view);
    assert_eq!(proc_uid(new_pid), site_uid);
    assert!(
        in_namespace(new_pid),
        "started again in its network namespace"
    );
    assert!(answers(&address).await);

    let idle_pid = pid_of(&idle);
    agent.shutdown_and_stop_workloads().await;
    wait_dead(new_pid).await;
    wait_dead(idle_pid).await;
}

#[tokio::test]
async fn every_route_but_healthz_needs_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 16).await;
    let http = http();
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
        json!({"slots_total": 2, "slots_used": 0, "slots_free": 2,
               "cpu_millis_total": 2000, "cpu_millis_allocated": 0, "cpu_millis_free": 2000,
               "memory_mib_total": 2048, "memory_mib_allocated": 0, "memory_mib_free": 2048})
    );
    // `a` ignores SIGTERM, and so does its child (ignored signals are inherited).
    let (status, a) = client
        .put("a", "sh -c 'trap \"\" TERM; sleep 300 & wait'")
        .await;
    assert_eq!(status, StatusCode::CREATED, "{a}");
    assert_eq!(client.put("b", "sleep 300").await.0, StatusCode::CREATED);
    // Two workloads of the default size (500m, 512 MiB).
    assert_eq!(
        client.get("/v1/capacity").await.1,
        json!({"slots_total": 2, "slots_used": 2, "slots_free": 0,
               "cpu_millis_total": 2000, "cpu_millis_allocated": 1000, "cpu_millis_free": 1000,
               "memory_mib_total": 2048, "memory_mib_allocated": 1024, "memory_mib_free": 1024})
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
            .any(|line| line["text"] == json!(expected))
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

/// What a workload finds when it tries to get at what is not its own: each attempt is
/// `ok`/`listed` (it worked) or `denied` (PermissionError). Printed as one `REPORT {json}` line,
/// which reaches the agent's log through the descriptor the workload was started with.
const PRYING_WORKLOAD: &str = r#"
import json, os, time

def read(path):
    try:
        with open(path, 'rb') as f:
            f.read(1)
        return 'ok'
    except PermissionError:
        return 'denied'
    except Exception as e:
        return type(e).__name__

def listing(path):
    try:
        os.listdir(path)
        return 'listed'
    except PermissionError:
        return 'denied'

def attempt(action):
    try:
        action()
        return 'ok'
    except PermissionError:
        return 'denied'

def write_own_file():
    with open('mine.txt', 'w') as f:
        f.write('mine')

status = open('/proc/self/status').read()
report = {
    'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
    'cwd': os.getcwd(), 'home': os.environ.get('HOME'),
    'no_new_privs': [l.split()[1] for l in status.splitlines() if l.startswith('NoNewPrivs:')],
    'token_file': read(os.environ['TOKEN_FILE']),
    'state_file': read(os.environ['STATE_FILE']),
    'other_log': read(os.environ['OTHER_LOG']),
    'other_lines': read(os.environ['OTHER_LINES']),
    'own_log': read(os.environ['OWN_LOG']),
    'own_log_through_proc': read('/proc/self/fd/1'),
    'agent_environ': read('/proc/%s/environ' % os.environ['AGENT_PID']),
    'other_environ': read('/proc/%s/environ' % os.environ['OTHER_PID']),
    'other_dir': listing(os.environ['OTHER_DIR']),
    'workloads_dir': listing(os.path.dirname(os.getcwd())),
    'data_dir': listing(os.environ['DATA_DIR']),
    'become_root': attempt(lambda: os.setuid(0)),
    'signal_other': attempt(lambda: os.kill(int(os.environ['OTHER_PID']), 0)),
    'write_own_file': attempt(write_own_file),
    'read_own_file': read('mine.txt'),
}
print('REPORT ' + json.dumps(report), flush=True)
time.sleep(300)
"#;

/// The first `REPORT` line of the workload's output, as JSON.
async fn report_of(client: &Client, key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        let (_, logs) = client.get(&format!("/v1/workloads/{key}/logs")).await;
        let report = logs["lines"].as_array().unwrap().iter().find_map(|line| {
            let json = line["text"].as_str()?.strip_prefix("REPORT ")?;
            Some(serde_json::from_str(json).unwrap())
        });
        if let Some(report) = report {
            return report;
        }
        assert!(Instant::now() < deadline, "no report from {key}: {logs}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn workloads_cannot_read_the_token_the_state_or_each_others_logs() {
    require_python();
    // The token as `bulkhead agent` reads it: from a private file, in a directory that anyone
    // may search (only the file's own mode protects it).
    let secrets = tempfile::tempdir().unwrap();
    std::fs::set_permissions(secrets.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let token_file = secrets.path().join("agent-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        bulkhead_common::secret_file::token_file_read(&token_file, "the agent's token").unwrap(),
        TOKEN
    );

    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().canonicalize().unwrap();
    let agent = start_agent(&data_dir, 4).await;
    let client = Client::new(&agent);

    let other_body = json!({
        "command": "python3 -c \"import time; print('other output', flush=True); time.sleep(300)\"",
        "env": {"DB_PASSWORD": "s3cret-of-other"},
    });
    let (status, other) = client
        .call(
            reqwest::Method::PUT,
            "/v1/workloads/other",
            Some(other_body),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    let other_log = data_dir.join("logs/other.out");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&other_log)
        .unwrap_or_default()
        .contains("other output")
    {
        assert!(
            Instant::now() < deadline,
            "the other workload never wrote its output"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let state_file = data_dir.join("agent-state.json");
    assert!(
        std::fs::read_to_string(&state_file)
            .unwrap()
            .contains("s3cret-of-other"),
        "the state file holds the other workload's secret: what the prying one must not read"
    );

    let env = json!({
        "PROBE": PRYING_WORKLOAD,
        "TOKEN_FILE": token_file,
        "STATE_FILE": state_file,
        "OTHER_LOG": other_log,
        "OTHER_LINES": data_dir.join("logs/other.lines"),
        "OWN_LOG": data_dir.join("logs/prying.lines"),
        "AGENT_PID": std::process::id().to_string(),
        "OTHER_PID": pid_of(&other).to_string(),
        "OTHER_DIR": data_dir.join("workloads/other"),
        "DATA_DIR": data_dir,
    });
    let (status, prying) = client
        .call(
            reqwest::Method::PUT,
            "/v1/workloads/prying",
            Some(json!({
                "command": "python3 -c \"import os; exec(os.environ['PROBE'])\"",
                "env": env,
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{prying}");
    let report = report_of(&client, "prying").await;

    // Its own user and group, nothing more, and no way back.
    let uid = uid_of(&prying);
    assert_ne!(uid, 0);
    assert_ne!(uid, uid_of(&other), "one uid per workload");
    assert_eq!(report["uid"], uid, "{report}");
    assert_eq!(report["euid"], uid);
    assert_eq!(report["gid"], uid);
    assert_eq!(report["groups"], json!([]));
    assert_eq!(report["no_new_privs"], json!(["1"]));
    assert_eq!(report["become_root"], "denied");
    assert_eq!(report["signal_other"], "denied");

    // Nothing of the agent's, nor of the other workload's.
    for attempt in [
        "token_file",
        "state_file",
        "other_log",
        "other_lines",
        "own_log",
        "own_log_through_proc",
        "agent_environ",
        "other_environ",
        "other_dir",
        "workloads_dir",
        "data_dir",
    ] {
        assert_eq!(report[attempt], "denied", "{attempt}: {report}");
    }

    // Its working directory is its own.
    let work_dir = data_dir.join("workloads/prying");
    assert_eq!(report["cwd"], work_dir.to_str().unwrap());
    assert_eq!(report["home"], work_dir.to_str().unwrap());
    assert_eq!(report["write_own_file"], "ok");
    assert_eq!(report["read_own_file"], "ok");
    let metadata = std::fs::metadata(&work_dir).unwrap();
    assert_eq!((metadata.uid(), metadata.gid()), (uid, uid));
    assert_eq!(mode(&work_dir), 0o700);
    assert_eq!(
        std::fs::metadata(work_dir.join("mine.txt")).unwrap().uid(),
        uid
    );

    let pids = [pid_of(&other), pid_of(&prying)];
    agent.shutdown_and_stop_workloads().await;
    for pid in pids {
        wait_dead(pid).await;
    }
}

#[tokio::test]
async fn the_data_directory_is_the_agents_and_workload_directories_their_own() {
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data_dir = parent.path().join("agent");
    let agent = start_agent_on(&data_dir, 4, 61050).await;
    let client = Client::new(&agent);
    let (status, view) = client.put("quiet", "sleep 300").await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    let uid = uid_of(&view);

    // Workloads pass through the data directory to their own, and nothing else.
    assert_eq!(mode(&data_dir), 0o711);
    assert_eq!(mode(&data_dir.join("agent-state.json")), 0o600);
    assert_eq!(mode(&data_dir.join("agent.lock")), 0o600);
    assert_eq!(mode(&data_dir.join("logs")), 0o700);
    for file in ["quiet.out", "quiet.err", "quiet.lines", "quiet.pos"] {
        assert_eq!(mode(&data_dir.join("logs").join(file)), 0o600, "{file}");
    }
    assert_eq!(mode(&data_dir.join("workloads")), 0o711);
    assert_eq!(mode(&data_dir.join("workloads/quiet")), 0o700);
    assert_eq!(
        std::fs::metadata(data_dir.join("workloads/quiet"))
            .unwrap()
            .uid(),
        uid
    );
    for path in [
        "",
        "agent-state.json",
        "logs",
        "logs/quiet.out",
        "logs/quiet.lines",
        "workloads",
    ] {
        assert_eq!(
            std::fs::metadata(data_dir.join(path)).unwrap().uid(),
            0,
            "{path}"
        );
    }
    let uids = uids_of(&agent);
    agent.shutdown().await;

    // Modes loosened by hand are tightened again at the next start.
    for (path, loose) in [
        ("", 0o777),
        ("logs", 0o755),
        ("logs/quiet.out", 0o644),
        ("logs/quiet.lines", 0o644),
        ("workloads", 0o777),
    ] {
        std::fs::set_permissions(data_dir.join(path), std::fs::Permissions::from_mode(loose))
            .unwrap();
    }
    let agent = restart_agent(&data_dir, 4, uids).await;
    assert_eq!(mode(&data_dir), 0o711);
    assert_eq!(mode(&data_dir.join("logs")), 0o700);
    assert_eq!(mode(&data_dir.join("logs/quiet.out")), 0o600);
    assert_eq!(mode(&data_dir.join("logs/quiet.lines")), 0o600);
    assert_eq!(mode(&data_dir.join("workloads")), 0o711);
    let pid = pid_of(&view);
    agent.shutdown_and_stop_workloads().await;
    wait_dead(pid).await;

    // A data directory that workloads could not reach is refused, saying why.
    let closed = tempfile::tempdir().unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = bulkhead_agent::start_in_free_uids(settings(&closed.path().join("agent"), 4))
        .await
        .err()
        .expect("refused");
    let message = err.to_string();
    assert!(
        message.contains("cannot reach the data directory"),
        "{message}"
    );
    assert!(message.contains("has mode 0700"), "{message}");
}

#[tokio::test]
async fn a_deleted_workload_takes_its_leftovers_along_and_frees_its_uid() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 2).await;
    let client = Client::new(&agent);
    // A daemon that leaves the workload's process group and session.
    let escaping = "python3 -c \"import subprocess, time; child = subprocess.Popen(['sleep', '300'], start_new_session=True); print('escaped', child.pid, flush=True); time.sleep(300)\"";
    let (status, leaving) = client.put("leaving", escaping).await;
    assert_eq!(status, StatusCode::CREATED, "{leaving}");
    let (status, staying) = client.put("staying", "sleep 300").await;
    assert_eq!(status, StatusCode::CREATED, "{staying}");
    let freed = uid_of(&leaving);

    let deadline = Instant::now() + Duration::from_secs(10);
    let escaped = loop {
        let (_, logs) = client.get("/v1/workloads/leaving/logs").await;
        let found = logs["lines"].as_array().unwrap().iter().find_map(|line| {
            line["text"]
                .as_str()?
                .strip_prefix("escaped ")?
                .parse::<u32>()
                .ok()
        });
        if let Some(pid) = found {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon never started: {logs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(alive(escaped));
    assert_eq!(proc_uid(escaped), freed);
    assert!(
        group_members(pid_of(&leaving))
            .iter()
            .all(|pid| *pid != escaped),
        "the daemon left the process group"
    );

    assert_eq!(client.delete("leaving").await, StatusCode::NO_CONTENT);
    wait_dead(escaped).await;
    assert!(
        alive(pid_of(&staying)),
        "another workload's process lives on"
    );
    assert!(!dir.path().join("workloads/leaving").exists());
    for file in ["out", "err", "lines", "pos"] {
        assert!(!dir.path().join(format!("logs/leaving.{file}")).exists());
    }

    // The range holds two uids: the next workload gets the one given back.
    let (status, next) = client.put("next", "sleep 300").await;
    assert_eq!(status, StatusCode::CREATED, "{next}");
    assert_eq!(uid_of(&next), freed);

    let pids = [pid_of(&staying), pid_of(&next)];
    agent.shutdown_and_stop_workloads().await;
    for pid in pids {
        wait_dead(pid).await;
    }
}

/// A plain HTTP client (reqwest's TLS is configured by bulkhead-common in a workspace build, so
/// its crypto provider must be installed before a client is built).
fn http() -> reqwest::Client {
    http_builder().build().expect("a client builds")
}

fn http_builder() -> reqwest::ClientBuilder {
    bulkhead_common::tls::crypto_provider_install();
    reqwest::Client::builder()
}
