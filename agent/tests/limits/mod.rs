//! Sizes held by cgroups, end to end: a workload over its memory is killed alone and started
//! again, a fork bomb stops at its cap, CPU weights share a busy core as the sizes say and a
//! quota caps an idle machine, and a deleted workload's cgroup goes with it. Each time the
//! neighbour keeps answering and the agent keeps serving.

use bulkhead_agent::{CGROUP_PARENT, PIDS_MAX, ResourceLimits};

use super::*;

/// Allocates memory until it is stopped: 8 MiB more every 20 ms.
const MEMORY_HOG: &str = "python3 -c \"import time\nx = []\nwhile True:\n    \
    x.append(bytearray(8 << 20))\n    time.sleep(0.02)\"";

/// The classic fork bomb: every process starts two more, without end.
const FORK_BOMB: &str = "bash -c ':(){ :|:& };:; sleep 300'";

/// Spins one core (`taskset -c 0`), printing nothing.
const SPIN_CORE_0: &str = "taskset -c 0 python3 -c 'while True: pass'";
const SPIN: &str = "python3 -c 'while True: pass'";

impl Client {
    /// A small HTTP server beside the workload under test, answering once it is healthy.
    async fn neighbour(&self) -> Value {
        self.put_sized("neighbour", HTTP_SERVER, 250, 128).await;
        self.wait_for("neighbour", "the neighbour answers", running_and_healthy)
            .await
    }

    async fn put_sized(&self, key: &str, command: &str, cpu_millis: u32, memory_mib: u32) -> Value {
        let body = json!({
            "command": command,
            "port": 8080,
            "size": {"cpu_millis": cpu_millis, "memory_mib": memory_mib},
        });
        let (status, view) = self
            .call(
                reqwest::Method::PUT,
                &format!("/v1/workloads/{key}"),
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{view}");
        assert_eq!(view["size"]["cpu_millis"], cpu_millis, "{view}");
        assert_eq!(view["size"]["memory_mib"], memory_mib, "{view}");
        view
    }
}

/// A file of the cgroup of the workload `view` in the hierarchy of `controller` (v1), or in
/// the unified one (v2).
fn cgroup_file(agent: &RunningAgent, view: &Value, controller: &str, file: &str) -> PathBuf {
    let name = format!("{}-{}", view["key"].as_str().unwrap(), uid_of(view));
    match agent.limits {
        ResourceLimits::CgroupV1 => Path::new("/sys/fs/cgroup")
            .join(controller)
            .join(CGROUP_PARENT)
            .join(name)
            .join(file),
        ResourceLimits::CgroupV2 => Path::new("/sys/fs/cgroup")
            .join(CGROUP_PARENT)
            .join(name)
            .join(file),
        ResourceLimits::NotEnforced => panic!("a root agent holds workloads to their sizes"),
    }
}

fn read_number(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    text.split_whitespace()
        .next()
        .and_then(|word| word.parse().ok())
        .unwrap_or_else(|| panic!("{}: {text:?} is not a number", path.display()))
}

/// `key N` in a flat-keyed cgroup file (`memory.events`, `pids.events`, `memory.oom_control`).
fn keyed_number(path: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}: no `{key}` in {text:?}", path.display()))
}

/// CPU seconds (user and system) of process `pid` so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15, in clock ticks (100 a second on Linux).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

#[tokio::test]
async fn a_workload_over_its_memory_is_killed_alone_and_restarted() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 4).await;
    let client = Client::new(&agent);
    let neighbour = client.neighbour().await;
    let hog = client.put_sized("hog", MEMORY_HOG, 250, 64).await;
    let limit = match agent.limits {
        ResourceLimits::CgroupV2 => read_number(&cgroup_file(&agent, &hog, "", "memory.max")),
        _ => read_number(&cgroup_file(
            &agent,
            &hog,
            "memory",
            "memory.limit_in_bytes",
        )),
    };
    assert_eq!(limit, 64 << 20, "the hog's cgroup holds it to 64 MiB");

    let killed = client
        .wait_for("hog", "the hog is killed out of memory", |view| {
            view["restarts"].as_u64() >= Some(1)
                && view["last_exit"]
                    .as_str()
                    .is_some_and(|exit| exit.contains("out of memory"))
        })
        .await;
    let exit = killed["last_exit"].as_str().unwrap();
    assert!(
        exit.contains("64 MiB") && exit.contains("signal 9"),
        "{exit}"
    );
    // Started again after its backoff, and killed again.
    client
        .wait_for("hog", "the hog is started again", |view| {
            view["restarts"].as_u64() >= Some(2)
        })
        .await;

    // The neighbour never noticed: same process, no restart, answering.
    let after = client.workload("neighbour").await;
    assert_eq!(pid_of(&after), pid_of(&neighbour), "{after}");
    assert_eq!(after["restarts"], 0, "{after}");
    assert!(answers(after["address"].as_str().unwrap()).await);
    let (status, _) = client.get("/v1/capacity").await;
    assert_eq!(status, StatusCode::OK, "the agent serves on");

    // The hog's log says why.
    let (_, logs) = client.get("/v1/workloads/hog/logs").await;
    let said = logs["lines"].as_array().unwrap().iter().any(|line| {
        line["stream"] == "system"
            && line["text"]
                .as_str()
                .is_some_and(|text| text.contains("out of memory"))
    });
    assert!(said, "{logs}");
    agent.shutdown_and_stop_workloads().await;
}

#[tokio::test]
async fn a_fork_bomb_stops_at_its_cap_and_goes_with_its_workload() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 4).await;
    let client = Client::new(&agent);
    let neighbour = client.neighbour().await;
    let bomb = client.put_sized("bomb", FORK_BOMB, 250, 2048).await;
    let current = cgroup_file(&agent, &bomb, "pids", "pids.current");
    let events = cgroup_file(&agent, &bomb, "pids", "pids.events");
    assert_eq!(
        read_number(&cgroup_file(&agent, &bomb, "pids", "pids.max")),
        PIDS_MAX as u64
    );

    // It reaches its cap and is refused more.
    let deadline = Instant::now() + Duration::from_secs(30);
    while keyed_number(&events, "max ") == 0 {
        assert!(
            Instant::now() < deadline,
            "the bomb never reached its cap: {} tasks",
            read_number(&current)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..10 {
        let tasks = read_number(&current);
        assert!(tasks <= PIDS_MAX as u64, "{tasks} tasks");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Meanwhile the neighbour answers, and the agent starts another workload.
    assert!(answers(neighbour["address"].as_str().unwrap()).await);
    client.put_sized("late", HTTP_SERVER, 250, 128).await;
    client
        .wait_for(
            "late",
            "a workload started beside the bomb answers",
            running_and_healthy,
        )
        .await;

    // Deleted, it leaves nothing: no process of its uid, no cgroup.
    let uid = uid_of(&bomb);
    assert_eq!(client.delete("bomb").await, StatusCode::NO_CONTENT);
    assert!(!current.parent().unwrap().exists(), "its cgroup is removed");
    let leftovers: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            alive(*pid) && std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == uid)
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "processes of uid {uid}: {leftovers:?}"
    );
    agent.shutdown_and_stop_workloads().await;
}

#[tokio::test]
async fn cpu_weights_share_a_busy_core_and_a_quota_caps_an_idle_one() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent(dir.path(), 4).await;
    let client = Client::new(&agent);

    // Two spinners on core 0, sized 1000m and 250m: weights 4 to 1. Neither quota binds (the
    // small one's 25% is above its fifth of the core).
    let big = client.put_sized("big", SPIN_CORE_0, 1000, 64).await;
    let small = client.put_sized("small", SPIN_CORE_0, 250, 64).await;
    let (big, small) = (pid_of(&big), pid_of(&small));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (big_before, small_before) = (cpu_seconds(big), cpu_seconds(small));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let big_used = cpu_seconds(big) - big_before;
    let small_used = cpu_seconds(small) - small_before;
    let ratio = small_used / big_used;
    assert!(
        (0.15..=0.35).contains(&ratio),
        "the 250m spinner had {small_used:.2} s of CPU and the 1000m one {big_used:.2} s \
         ({ratio:.2}; 0.25 expected)"
    );
    assert_eq!(client.delete("big").await, StatusCode::NO_CONTENT);
    assert_eq!(client.delete("small").await, StatusCode::NO_CONTENT);

    // Alone, on any core, a 200m spinner gets its fifth of a core and no more.
    let capped = pid_of(&client.put_sized("capped", SPIN, 200, 64).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_seconds(capped);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let share = (cpu_seconds(capped) - before) / 3.0;
    assert!(
        (0.05..=0.25).contains(&share),
        "the 200m spinner used {share:.2} of a core"
    );
    agent.shutdown_and_stop_workloads().await;
}

#[tokio::test]
async fn sizes_are_validated_and_kept_across_an_agent_restart() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    let agent = start_agent_on(dir.path(), 2, 61900).await;
    let client = Client::new(&agent);
    for (size, says) in [
        (
            json!({"cpu_millis": 5, "memory_mib": 64}),
            "size.cpu_millis",
        ),
        (
            json!({"cpu_millis": 500, "memory_mib": 8}),
            "size.memory_mib",
        ),
    ] {
        let (status, problem) = client
            .call(
                reqwest::Method::PUT,
                "/v1/workloads/bad",
                Some(json!({"command": "sleep 100", "size": size})),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains(says),
            "{problem}"
        );
    }
    let (status, problem) = client
        .call(
            reqwest::Method::PUT,
            "/v1/workloads/bad",
            Some(json!({"command": "sleep 100", "size": {"cpu_millis": 500}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");

    // Without a size: the default.
    let (status, plain) = client.put("plain", "sleep 300").await;
    assert_eq!(status, StatusCode::CREATED, "{plain}");
    assert_eq!(plain["size"], json!({"cpu_millis": 500, "memory_mib": 512}));
    let sized = client.put_sized("sized", "sleep 300", 300, 96).await;
    let procs = cgroup_file(&agent, &sized, "memory", "cgroup.procs");
    let in_cgroup = std::fs::read_to_string(&procs).unwrap();
    assert!(
        in_cgroup
            .lines()
            .any(|pid| pid == pid_of(&sized).to_string()),
        "pid {} is not in {}: {in_cgroup:?}",
        pid_of(&sized),
        procs.display()
    );

    // A restarted agent re-adopts it with its size, in its cgroup.
    let uids = uids_of(&agent);
    agent.shutdown().await;
    let agent = restart_agent(dir.path(), 2, uids).await;
    let client = Client::new(&agent);
    let view = client.workload("sized").await;
    assert_eq!(view["adopted"], true, "{view}");
    assert_eq!(pid_of(&view), pid_of(&sized));
    assert_eq!(view["size"], json!({"cpu_millis": 300, "memory_mib": 96}));
    let in_cgroup = std::fs::read_to_string(&procs).unwrap();
    assert!(
        in_cgroup
            .lines()
            .any(|pid| pid == pid_of(&sized).to_string())
    );
    agent.shutdown_and_stop_workloads().await;
}

#[tokio::test]
async fn a_workload_is_taken_only_where_its_size_fits() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let uids = UidRange::new(61910, 61913).unwrap();
    let offering = |cpu_millis: u32, memory_mib: u32| {
        let mut settings = settings(dir.path(), 4);
        settings.workload_uids = uids;
        settings.cpu_millis = Some(cpu_millis);
        settings.memory_mib = Some(memory_mib);
        settings
    };
    let agent = bulkhead_agent::start(offering(1500, 1024)).await.unwrap();
    let client = Client::new(&agent);
    let put = async |key: &str, cpu_millis: u32, memory_mib: u32| {
        let body = json!({"command": "sleep 300",
                          "size": {"cpu_millis": cpu_millis, "memory_mib": memory_mib}});
        client
            .call(
                reqwest::Method::PUT,
                &format!("/v1/workloads/{key}"),
                Some(body),
            )
            .await
    };
    assert_eq!(put("a", 1000, 512).await.0, StatusCode::CREATED);
    // Too much CPU, then too much memory: refused, saying what is free.
    for (cpu_millis, memory_mib) in [(1000, 256), (500, 600)] {
        let (status, problem) = put("b", cpu_millis, memory_mib).await;
        assert_eq!(status, StatusCode::CONFLICT, "{problem}");
        assert_eq!(problem["code"], "capacity_exhausted");
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("500m CPU and 512 MiB free")
                && detail.contains(&format!("{cpu_millis}m CPU, {memory_mib} MiB")),
            "{detail}"
        );
    }
    assert_eq!(put("b", 500, 512).await.0, StatusCode::CREATED);
    let capacity = client.get("/v1/capacity").await.1;
    assert_eq!(
        (
            &capacity["cpu_millis_allocated"],
            &capacity["cpu_millis_free"],
            &capacity["memory_mib_allocated"],
            &capacity["memory_mib_free"],
            &capacity["slots_free"],
        ),
        (&json!(1500), &json!(0), &json!(1024), &json!(0), &json!(2)),
        "{capacity}"
    );
    // Full by size with slots left: even the smallest size waits; an existing key answers.
    assert_eq!(put("c", 10, 16).await.0, StatusCode::CONFLICT);
    assert_eq!(put("a", 1000, 512).await.0, StatusCode::OK);
    // Deleting one frees its size.
    assert_eq!(client.delete("a").await, StatusCode::NO_CONTENT);
    assert_eq!(client.get("/v1/capacity").await.1["cpu_millis_free"], 1000);
    assert_eq!(put("c", 1000, 512).await.0, StatusCode::CREATED);

    // Restarted offering less than its workloads take: they keep running, nothing new fits.
    let b = client.workload("b").await;
    agent.shutdown().await;
    let agent = bulkhead_agent::start(offering(1000, 1024)).await.unwrap();
    let client = Client::new(&agent);
    let view = client.workload("b").await;
    assert_eq!(
        (view["adopted"].clone(), pid_of(&view)),
        (json!(true), pid_of(&b))
    );
    let capacity = client.get("/v1/capacity").await.1;
    assert_eq!(capacity["cpu_millis_allocated"], 1500, "{capacity}");
    assert_eq!(capacity["cpu_millis_free"], 0, "{capacity}");
    let (status, _) = client
        .call(
            reqwest::Method::PUT,
            "/v1/workloads/d",
            Some(json!({"command": "sleep 300", "size": {"cpu_millis": 10, "memory_mib": 16}})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    agent.shutdown_and_stop_workloads().await;

    // Offering nothing said: this machine's CPUs and memory, less the reserve.
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings(dir.path(), 2);
    (settings.cpu_millis, settings.memory_mib) = (None, None);
    settings.workload_uids = shared_uids();
    let agent = bulkhead_agent::start_in_free_uids(settings).await.unwrap();
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_mib: u32 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u32>().ok())
        .unwrap()
        / 1024;
    let capacity = Client::new(&agent).get("/v1/capacity").await.1;
    assert_eq!(capacity["cpu_millis_total"], cpus * 1000, "{capacity}");
    assert_eq!(
        capacity["memory_mib_total"],
        total_mib - bulkhead_agent::capacity::memory_reserve_mib(total_mib),
        "{capacity}"
    );
    assert_eq!(agent.allocatable.cpu_millis, cpus * 1000);
    agent.shutdown_and_stop_workloads().await;
}
