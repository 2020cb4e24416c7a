//! The supervisor: the workloads of this machine and their processes.
//!
//! Each workload has a monitor task that starts its process, waits for it to end and starts it
//! again after a capped exponential backoff ([`Backoff`]), and an observer task that probes its
//! health over HTTP and keeps its log bounded. Every change of a workload's process is written
//! to the state file ([`crate::state`]). When the agent starts it re-adopts the processes of the
//! state file that still run (watching them by polling `/proc`, since it cannot `wait()` for a
//! process that is not its child) and starts the others again.
//!
//! The agent stopping (detach) leaves the processes running; deleting a workload, or stopping
//! the agent together with its workloads, stops them: `SIGTERM` to the process group, `SIGKILL`
//! after [`STOP_GRACE`].
//!
//! When workloads run as users of their own ([`Isolation::UserPerWorkload`]), each workload
//! gets a uid of the range when it is made, keeps it in the state file (a re-adopted process
//! must still run as it) and gives it back when it is deleted. Nothing else runs as that uid:
//! whatever a process leaves behind when it ends (even outside its process group) is killed,
//! and so is anything found running as the uid before a process starts.
//!
//! When workloads also have network namespaces of their own
//! ([`NetworkIsolation::NamespacePerWorkload`]), each process starts in a namespace made afresh
//! for it, the agent holds the workload's host port (nothing else of the host may bind it: the
//! workload listens on it inside its namespace), and a process re-adopted after an agent
//! restart must still be in the workload's namespace. Deleting the workload removes it.

mod prepare;

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use serde::Serialize;
use tokio::process::Child;
use tokio::sync::watch;

use crate::capacity::{Allocatable, Allocated, Capacity};
use crate::health;
use crate::isolation::{self, Isolation, UidRange};
use crate::limits::{ResourceLimits, WorkloadCgroup, WorkloadSize};
use crate::logs::{self, LogDir, LogPage, LogQuery};
use crate::network::{NetworkIsolation, WorkloadNetwork};
use crate::ports;
use crate::process::{self, Launch};
use crate::source::{GitSource, SourceCache, SourceView};
use crate::spec::{HealthCheck, NewWorkload, expand_port, split_command, validate};
use crate::state::{AgentState, StateStore, WorkloadRecord};

/// How long a stopped workload has between `SIGTERM` and `SIGKILL`.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);
/// The first restart delay, doubled after each exit up to [`BACKOFF_MAX`].
pub(crate) const BACKOFF_INITIAL: Duration = Duration::from_millis(500);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A process that ran this long resets the backoff.
pub(crate) const BACKOFF_RESET_UPTIME: Duration = Duration::from_secs(60);
/// How often an adopted process (not the agent's child) is checked for having ended.
const ADOPTED_POLL: Duration = Duration::from_millis(500);
/// Health probes: quick while a process starts, then every few seconds.
const PROBE_INTERVAL_STARTING: Duration = Duration::from_millis(300);
const PROBE_INTERVAL: Duration = Duration::from_secs(3);
/// A started process that has not answered HTTP by then is `running` (but not healthy).
const STARTUP_GRACE: Duration = Duration::from_secs(10);
/// How many uids of the range that belong to named users are passed over, at most, when
/// looking for a free one.
const NAMED_UIDS_SKIPPED_MAX: u64 = 1024;

/// Where a workload's process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadState {
    /// Its code is being fetched and built (a workload with a `source`), before its first
    /// start.
    Preparing,
    /// Started, not yet answering HTTP (for up to ten seconds).
    Starting,
    /// Up: answering HTTP, adopted, or up for ten seconds.
    Running,
    /// Ended, to be started again after the backoff delay.
    Restarting,
    /// Being stopped (deleted), or stopped with the agent.
    Stopped,
    /// Its command could not be started (e.g. not found), or its code could not be fetched
    /// or built (`last_exit` says why); tried again after the backoff.
    Failed,
}

/// What the platform's health check of a workload (`health_check`) says of its current
/// process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckHealth {
    /// Not yet `healthy_threshold` passes in a row since the process started.
    Pending,
    /// Passed `healthy_threshold` checks in a row, and has not failed `unhealthy_threshold`
    /// in a row since.
    Healthy,
    /// Failed `unhealthy_threshold` checks in a row after being healthy.
    Unhealthy,
}

/// The results of the platform's checks of one process of a workload.
#[derive(Debug, Clone, Copy)]
struct CheckState {
    /// The process checked (see [`Status::generation`]): a new process starts `pending`.
    generation: u64,
    health: CheckHealth,
    /// Consecutive results: positive, passes in a row; negative, failures in a row.
    streak: i32,
}

impl CheckState {
    fn fresh(generation: u64) -> Self {
        Self {
            generation,
            health: CheckHealth::Pending,
            streak: 0,
        }
    }

    /// Adds a result; the health it leaves.
    fn record(&mut self, passed: bool, check: &HealthCheck) -> CheckHealth {
        self.streak = match (passed, self.streak) {
            (true, n) if n > 0 => n.saturating_add(1),
            (true, _) => 1,
            (false, n) if n < 0 => n.saturating_sub(1),
            (false, _) => -1,
        };
        let healthy_enough = self.streak >= check.healthy_threshold as i32;
        let unhealthy_enough = self.streak <= -(check.unhealthy_threshold as i32);
        self.health = match self.health {
            _ if healthy_enough => CheckHealth::Healthy,
            CheckHealth::Healthy if unhealthy_enough => CheckHealth::Unhealthy,
            same => same,
        };
        self.health
    }
}

/// A workload as the API shows it. Its environment is not shown (it may hold secrets).
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadView {
    pub key: String,
    pub command: String,
    /// The port the workload asked for (informational: it listens on `PORT`).
    pub port: Option<u16>,
    /// `advertise_host:PORT`, where it answers.
    pub address: String,
    pub pid: Option<u32>,
    pub state: WorkloadState,
    pub restarts: u32,
    /// Whether it answered the last health probe; `null` before the first one.
    pub healthy: Option<bool>,
    /// The platform's health check of it, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// What that check says of its current process; absent without a check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<CheckHealth>,
    /// How its last process ended.
    pub last_exit: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    /// Whether its process was started by an earlier run of the agent (re-adopted).
    pub adopted: bool,
    /// The user (and group) it runs as; `null` when workloads run as the agent's own user.
    pub uid: Option<u32>,
    /// Where its code comes from, when it is built from a repository (its token left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceView>,
    /// What it is given of the machine.
    pub size: WorkloadSize,
}

/// What a `put` did.
pub(crate) enum Put {
    Created(WorkloadView),
    Existing(WorkloadView),
}

#[derive(Debug)]
pub(crate) enum SupervisorError {
    /// Every slot is used.
    Full {
        slots: u32,
    },
    /// The workload's size does not fit in what the agent has free.
    NoRoom {
        size: WorkloadSize,
        free: Allocatable,
        offered: Allocatable,
    },
    /// No uid of the range is free.
    UidsExhausted {
        uids: UidRange,
    },
    /// The workload is being stopped; it can be made again once it is gone.
    Stopping,
    /// The workload's definition is not acceptable.
    Invalid(String),
    Internal(anyhow::Error),
}

/// What the monitor and observer tasks are told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Control {
    Run,
    /// End supervision, leave the process running (agent shutdown).
    Detach,
    /// Stop the process and end supervision.
    Stop,
}

struct Workload {
    key: String,
    command: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    port: Option<u16>,
    host_port: u16,
    /// The platform's check of it, made by [`Supervisor::check`].
    health_check: Option<HealthCheck>,
    /// Where its code comes from, and its build's words (`$PORT` expanded).
    source: Option<GitSource>,
    build_argv: Option<Vec<String>>,
    created_at: DateTime<Utc>,
    /// The user it runs as: see [`Isolation`].
    uid: Option<u32>,
    /// Its network namespace, when it has one: see [`NetworkIsolation`].
    network: Option<WorkloadNetwork>,
    /// The host port, held by the agent while the workload listens on it in its namespace.
    _port_held: Option<tokio::net::TcpSocket>,
    /// What it is given of the machine, and the cgroup that holds it to that (see
    /// [`ResourceLimits`]).
    size: WorkloadSize,
    cgroup: Option<WorkloadCgroup>,
    status: Mutex<Status>,
    control: watch::Sender<Control>,
    /// Set when the monitor task has ended.
    finished: watch::Sender<bool>,
}

struct Status {
    state: WorkloadState,
    pid: Option<u32>,
    proc_start: Option<u64>,
    restarts: u32,
    healthy: Option<bool>,
    last_exit: Option<String>,
    started_at: Option<DateTime<Utc>>,
    /// When the current process started, on this agent's clock.
    since: Instant,
    adopted: bool,
    /// Counts processes, so that a health result is applied only to the process probed.
    generation: u64,
    /// The platform's checks (with a `health_check`).
    check: CheckState,
    /// Whether its code is checked out and built (always, without a `source`).
    prepared: bool,
    /// The OOM kills of its cgroup when the current process started.
    oom_kills: u64,
}

impl Workload {
    fn status(&self) -> MutexGuard<'_, Status> {
        self.status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn update(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.status());
    }

    fn record(&self) -> WorkloadRecord {
        let status = self.status();
        WorkloadRecord {
            key: self.key.clone(),
            command: self.command.clone(),
            env: self.env.clone(),
            port: self.port.unwrap_or(0),
            host_port: self.host_port,
            pid: status.pid,
            proc_start: status.proc_start,
            started_at: status.started_at,
            restarts: status.restarts,
            created_at: self.created_at,
            uid: self.uid,
            health_check: self.health_check.clone(),
            source: self.source.clone(),
            prepared: status.prepared && self.source.is_some(),
            size: Some(self.size),
        }
    }

    fn view(&self, advertise_host: &str) -> WorkloadView {
        let status = self.status();
        let host = if advertise_host.contains(':') && !advertise_host.starts_with('[') {
            format!("[{advertise_host}]") // an IPv6 address
        } else {
            advertise_host.to_owned()
        };
        WorkloadView {
            key: self.key.clone(),
            command: self.command.clone(),
            port: self.port,
            address: format!("{host}:{}", self.host_port),
            pid: status.pid,
            state: status.state,
            restarts: status.restarts,
            healthy: status.healthy,
            health_check: self.health_check.clone(),
            health: self.health_check.as_ref().map(|_| {
                if status.check.generation == status.generation {
                    status.check.health
                } else {
                    CheckHealth::Pending
                }
            }),
            last_exit: status.last_exit.clone(),
            started_at: status.started_at,
            adopted: status.adopted,
            uid: self.uid,
            source: self.source.as_ref().map(GitSource::view),
            size: self.size,
        }
    }

    /// `how` its process ended, saying so when the OOM killer killed one of its processes
    /// meanwhile: it went over its memory.
    fn out_of_memory(&self, how: String) -> String {
        let Some(cgroup) = &self.cgroup else {
            return how;
        };
        if cgroup.oom_kills() > self.status().oom_kills {
            format!(
                "out of memory: {how} (the OOM killer ended it at its {} MiB)",
                self.size.memory_mib
            )
        } else {
            how
        }
    }

    /// The process to probe now (its generation), if one is starting or running.
    fn probed_generation(&self) -> Option<u64> {
        let status = self.status();
        matches!(
            status.state,
            WorkloadState::Starting | WorkloadState::Running
        )
        .then_some(status.generation)
    }

    fn control(&self) -> Control {
        *self.control.borrow()
    }

    async fn wait_finished(&self) {
        let mut finished = self.finished.subscribe();
        let _ = finished.wait_for(|done| *done).await;
    }
}

/// Marks the monitor task finished however it ends.
struct FinishedGuard(Arc<Workload>);

impl Drop for FinishedGuard {
    fn drop(&mut self) {
        self.0.finished.send_replace(true);
    }
}

/// A workload's current process.
enum Process {
    Child(Child),
    Adopted { pid: u32, start_time: Option<u64> },
}

impl Process {
    /// Waits for the process to end and says how it did.
    async fn ended(&mut self) -> String {
        match self {
            Process::Child(child) => match child.wait().await {
                Ok(status) => process::describe_exit(status),
                Err(err) => format!("lost: waiting for it failed: {err}"),
            },
            Process::Adopted { pid, start_time } => loop {
                tokio::time::sleep(ADOPTED_POLL).await;
                let alive = process::proc_info(*pid)
                    .is_some_and(|info| start_time.is_none_or(|start| start == info.start_time));
                if !alive {
                    break "exited (adopted process: its exit status is unknown)".to_owned();
                }
            },
        }
    }
}

/// Restart delays: [`BACKOFF_INITIAL`] doubling to [`BACKOFF_MAX`], back to the start after a
/// process ran for [`BACKOFF_RESET_UPTIME`].
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            next: BACKOFF_INITIAL,
        }
    }
}

impl Backoff {
    /// The delay before the next start, after a process that ran for `uptime`.
    pub(crate) fn after_exit(&mut self, uptime: Duration) -> Duration {
        if uptime >= BACKOFF_RESET_UPTIME {
            self.next = BACKOFF_INITIAL;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        delay
    }
}

/// Resolves when the control is no longer `Run`, with the new control. A dropped sender
/// (cannot happen while the workload exists) counts as detach: never kill by accident.
async fn until_not_run(control: &mut watch::Receiver<Control>) -> Control {
    loop {
        let current = *control.borrow_and_update();
        if current != Control::Run {
            return current;
        }
        if control.changed().await.is_err() {
            return Control::Detach;
        }
    }
}

/// The workloads of this machine.
pub(crate) struct Supervisor {
    slots: u32,
    /// What the workloads' sizes may add up to.
    allocatable: Allocatable,
    advertise_host: String,
    isolation: Isolation,
    network: NetworkIsolation,
    limits: ResourceLimits,
    work_root: PathBuf,
    workloads: Mutex<BTreeMap<String, Arc<Workload>>>,
    /// Where the search for a free uid starts (see [`AgentState::uid_next`]).
    uid_next: Mutex<u32>,
    store: StateStore,
    logs: Arc<LogDir>,
    /// The repositories workloads' code is fetched into.
    sources: SourceCache,
}

impl Supervisor {
    /// Loads the state file of `data_dir` and resumes supervising its workloads: adopts the
    /// processes that still run (as the workload's uid), starts the others.
    pub(crate) async fn open(
        data_dir: &Path,
        slots: u32,
        allocatable: Allocatable,
        advertise_host: String,
        isolation: Isolation,
        network: NetworkIsolation,
        limits: ResourceLimits,
    ) -> anyhow::Result<Arc<Self>> {
        let work_root = data_dir.join("workloads");
        // Workloads running as users of their own pass through it to their own directory,
        // without listing it.
        let work_root_mode = match isolation {
            Isolation::UserPerWorkload(_) => 0o711,
            Isolation::SameUser => 0o700,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(work_root_mode)
            .create(&work_root)?;
        std::fs::set_permissions(&work_root, std::fs::Permissions::from_mode(work_root_mode))?;
        let store = StateStore::new(data_dir);
        let state = store.load()?;
        let supervisor = Arc::new(Self {
            slots,
            allocatable,
            advertise_host,
            isolation,
            network,
            limits,
            work_root,
            workloads: Mutex::new(BTreeMap::new()),
            uid_next: Mutex::new(state.uid_next.unwrap_or(0)),
            store,
            logs: Arc::new(LogDir::new(data_dir)?),
            sources: SourceCache::open(data_dir)?,
        });
        let uids = supervisor.uids_resume(&state.workloads)?;
        let mut resumed = Vec::new();
        for (record, uid) in state.workloads.into_iter().zip(uids) {
            let words = split_command(&record.command).and_then(|argv| {
                let build = record
                    .source
                    .as_ref()
                    .map(GitSource::validate)
                    .transpose()?;
                Ok((argv, build.flatten()))
            });
            let (argv, build_argv) = match words {
                Ok((argv, build)) => (
                    expand_port(argv, record.host_port),
                    build.map(|build| expand_port(build, record.host_port)),
                ),
                Err(err) => {
                    tracing::error!(key = record.key, "dropping a stored workload: {err}");
                    continue;
                }
            };
            let adopt = record
                .pid
                .filter(|pid| {
                    let same = process::is_same_process(*pid, record.proc_start, &argv);
                    if same {
                        tracing::info!(key = record.key, pid, "re-adopting the running workload");
                    } else {
                        tracing::info!(
                            key = record.key,
                            pid,
                            "the workload's process is gone (or its pid was reused): starting it again"
                        );
                    }
                    same
                })
                .filter(|pid| runs_as_its_user(&record.key, *pid, uid));
            let workload_network = supervisor.network_of(uid);
            let adopt = adopt.filter(|pid| {
                workload_network
                    .as_ref()
                    .is_none_or(|network| runs_in_its_network(&record.key, *pid, network))
            });
            let port_held = match &workload_network {
                Some(_) => ports::hold(record.host_port)
                    .inspect_err(|err| {
                        tracing::warn!(
                            key = record.key,
                            port = record.host_port,
                            "holding the workload's host port failed (another program of the \
                             host may take it): {err}"
                        )
                    })
                    .ok(),
                None => None,
            };
            if let (Some(network), Some(_)) = (&workload_network, adopt) {
                // The host's forwarding of its port, in case the host's ruleset was reset.
                if let Err(err) = network.port_forward(record.host_port) {
                    tracing::warn!(key = record.key, "forwarding the workload's port: {err:#}");
                }
            }
            let prepared = record.prepared || record.source.is_none();
            let size = record.size.unwrap_or(WorkloadSize::DEFAULT);
            let cgroup = limits
                .cgroup(&cgroup_name(&record.key, uid), size)
                .with_context(|| format!("the cgroup of the workload `{}`", record.key))?;
            // An adopted process is judged by the OOM kills from now on: an earlier process's
            // must not make its ordinary exit look like one.
            let oom_kills = cgroup.as_ref().map_or(0, WorkloadCgroup::oom_kills);
            let workload = Arc::new(Workload {
                key: record.key,
                command: record.command,
                argv,
                env: record.env,
                port: (record.port != 0).then_some(record.port),
                host_port: record.host_port,
                health_check: record.health_check,
                source: record.source,
                build_argv,
                created_at: record.created_at,
                uid,
                network: workload_network,
                _port_held: port_held,
                size,
                cgroup,
                status: Mutex::new(Status {
                    state: if adopt.is_some() {
                        WorkloadState::Running
                    } else {
                        WorkloadState::Starting
                    },
                    pid: adopt,
                    proc_start: adopt.and(record.proc_start),
                    restarts: record.restarts,
                    healthy: None,
                    last_exit: None,
                    started_at: adopt.and(record.started_at),
                    since: Instant::now(),
                    adopted: adopt.is_some(),
                    generation: 0,
                    check: CheckState::fresh(0),
                    prepared,
                    oom_kills,
                }),
                control: watch::Sender::new(Control::Run),
                finished: watch::Sender::new(false),
            });
            supervisor
                .lock()
                .insert(workload.key.clone(), workload.clone());
            resumed.push((workload, adopt.map(|pid| (pid, record.proc_start))));
        }
        for (workload, adopt) in resumed {
            supervisor.launch_tasks(workload, adopt);
        }
        let capacity = supervisor.capacity();
        if capacity.cpu_millis_allocated > capacity.cpu_millis_total
            || capacity.memory_mib_allocated > capacity.memory_mib_total
        {
            // Kept running (taking them down would be worse): new ones wait for room.
            tracing::warn!(
                "the resumed workloads take {}m CPU and {} MiB, more than the {allocatable}                  this agent offers: it takes no new workload until they fit",
                capacity.cpu_millis_allocated,
                capacity.memory_mib_allocated
            );
        }
        supervisor.persist().await;
        Ok(supervisor)
    }

    /// The uid of each stored workload: the one it had, when it is still in the range (and not
    /// another's); a new one otherwise (a state file of an agent that ran workloads as its own
    /// user, or a changed range). None of them when workloads run as the agent's own user.
    fn uids_resume(&self, records: &[WorkloadRecord]) -> anyhow::Result<Vec<Option<u32>>> {
        let Isolation::UserPerWorkload(range) = self.isolation else {
            return Ok(vec![None; records.len()]);
        };
        let mut taken = HashSet::new();
        let mut uids: Vec<Option<u32>> = records
            .iter()
            .map(|record| {
                record
                    .uid
                    .filter(|uid| range.contains(*uid) && taken.insert(*uid))
            })
            .collect();
        for (record, uid) in records.iter().zip(&mut uids) {
            if uid.is_none() {
                let new = self.uid_allocate(range, &taken).ok_or_else(|| {
                    anyhow::anyhow!(
                        "no free uid in {range} for the stored workload `{}`",
                        record.key
                    )
                })?;
                taken.insert(new);
                *uid = Some(new);
            }
        }
        Ok(uids)
    }

    /// A free uid for a new workload: the next in turn after the last one handed out, that no
    /// workload holds (`taken`) and that no named user of the machine owns.
    fn uid_allocate(&self, range: UidRange, taken: &HashSet<u32>) -> Option<u32> {
        let mut next = self
            .uid_next
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut candidate = if range.contains(*next) {
            *next
        } else {
            range.first()
        };
        let tries = range
            .count()
            .min(taken.len() as u64 + NAMED_UIDS_SKIPPED_MAX);
        for _ in 0..tries {
            let uid = candidate;
            candidate = range.after(uid);
            if taken.contains(&uid) {
                continue;
            }
            if isolation::uid_is_named(uid) {
                tracing::warn!(
                    uid,
                    "passing over a workload uid that belongs to a named user of this machine"
                );
                continue;
            }
            *next = candidate;
            return Some(uid);
        }
        None
    }

    /// The network namespace of the workload that runs as `uid`, when workloads have them.
    fn network_of(&self, uid: Option<u32>) -> Option<WorkloadNetwork> {
        match self.network {
            NetworkIsolation::NamespacePerWorkload => uid.map(WorkloadNetwork::of),
            NetworkIsolation::Shared => None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Workload>>> {
        self.workloads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn find(&self, key: &str) -> Option<Arc<Workload>> {
        self.lock().get(key).cloned()
    }

    fn launch_tasks(self: &Arc<Self>, workload: Arc<Workload>, adopt: Option<(u32, Option<u64>)>) {
        tokio::spawn(self.clone().monitor(workload.clone(), adopt));
        if workload.health_check.is_some() {
            tokio::spawn(self.clone().check(workload.clone()));
        }
        tokio::spawn(self.clone().observe(workload.clone()));
        tokio::spawn(self.clone().collect_output(workload));
    }

    /// Starts the workload `key`, or returns it if it exists.
    pub(crate) async fn put(
        self: &Arc<Self>,
        key: &str,
        new: NewWorkload,
    ) -> Result<Put, SupervisorError> {
        let (argv, build_argv) = validate(&new).map_err(SupervisorError::Invalid)?;
        let build_prepared = new.source.is_none();
        let workload = {
            let mut workloads = self.lock();
            if let Some(existing) = workloads.get(key) {
                if existing.control() != Control::Run {
                    return Err(SupervisorError::Stopping);
                }
                return Ok(Put::Existing(existing.view(&self.advertise_host)));
            }
            if workloads.len() >= self.slots as usize {
                return Err(SupervisorError::Full { slots: self.slots });
            }
            let allocated = Allocated::sum(workloads.values().map(|w| w.size));
            if !self.allocatable.fits(allocated, new.size) {
                return Err(SupervisorError::NoRoom {
                    size: new.size,
                    free: self.allocatable.free(allocated),
                    offered: self.allocatable,
                });
            }
            let uid = match self.isolation {
                Isolation::UserPerWorkload(uids) => {
                    let taken: HashSet<u32> = workloads.values().filter_map(|w| w.uid).collect();
                    let uid = self.uid_allocate(uids, &taken);
                    Some(uid.ok_or(SupervisorError::UidsExhausted { uids })?)
                }
                Isolation::SameUser => None,
            };
            let network = self.network_of(uid);
            let taken: HashSet<u16> = workloads.values().map(|w| w.host_port).collect();
            let (host_port, port_held) = match &network {
                Some(network) => {
                    ports::claim(&taken, network).map(|(port, held)| (port, Some(held)))
                }
                None => ports::allocate(&taken)
                    .map(|port| (port, None))
                    .map_err(anyhow::Error::from),
            }
            .map_err(|err| {
                SupervisorError::Internal(anyhow::anyhow!("no port for the workload: {err:#}"))
            })?;
            let cgroup = self
                .limits
                .cgroup(&cgroup_name(key, uid), new.size)
                .map_err(SupervisorError::Internal)?;
            let workload = Arc::new(Workload {
                key: key.to_owned(),
                command: new.command,
                argv: expand_port(argv, host_port),
                env: new.env,
                port: new.port,
                host_port,
                health_check: new.health_check,
                source: new.source,
                build_argv: build_argv.map(|build| expand_port(build, host_port)),
                created_at: Utc::now(),
                uid,
                network,
                _port_held: port_held,
                size: new.size,
                cgroup,
                status: Mutex::new(Status {
                    state: WorkloadState::Starting,
                    pid: None,
                    proc_start: None,
                    restarts: 0,
                    healthy: None,
                    last_exit: None,
                    started_at: None,
                    since: Instant::now(),
                    adopted: false,
                    generation: 0,
                    check: CheckState::fresh(0),
                    prepared: build_prepared,
                    oom_kills: 0,
                }),
                control: watch::Sender::new(Control::Run),
                finished: watch::Sender::new(false),
            });
            workloads.insert(key.to_owned(), workload.clone());
            workload
        };
        tracing::info!(
            key,
            port = workload.host_port,
            uid = workload.uid,
            command = workload.command,
            "starting a workload"
        );
        // The first start happens here, so that the answer already shows the process; nothing
        // waits between inserting the workload and handing its process to the monitor, so a
        // request dropped half-way cannot leave a process unsupervised. A workload built from
        // a repository is prepared first, by its monitor.
        if build_prepared {
            let first = self.spawn_process(&workload);
            tokio::spawn(self.clone().monitor_from(workload.clone(), first));
        } else {
            workload.update(|status| status.state = WorkloadState::Preparing);
            tokio::spawn(self.clone().monitor(workload.clone(), None));
        }
        if workload.health_check.is_some() {
            tokio::spawn(self.clone().check(workload.clone()));
        }
        tokio::spawn(self.clone().observe(workload.clone()));
        tokio::spawn(self.clone().collect_output(workload.clone()));
        let view = workload.view(&self.advertise_host);
        self.persist_detached().await;
        Ok(Put::Created(view))
    }

    pub(crate) fn get(&self, key: &str) -> Option<WorkloadView> {
        self.find(key).map(|w| w.view(&self.advertise_host))
    }

    pub(crate) fn list(&self) -> Vec<WorkloadView> {
        self.lock()
            .values()
            .map(|w| w.view(&self.advertise_host))
            .collect()
    }

    pub(crate) fn capacity(&self) -> Capacity {
        let workloads = self.lock();
        let used = u32::try_from(workloads.len()).unwrap_or(u32::MAX);
        let allocated = Allocated::sum(workloads.values().map(|w| w.size));
        Capacity::new(self.slots, used, self.allocatable, allocated)
    }

    /// The lines of the workload's output that `query` asks for, waiting up to `wait` for one
    /// when there is none yet; `None` when there is no such workload.
    pub(crate) async fn logs(
        &self,
        key: &str,
        query: LogQuery,
        wait: Duration,
    ) -> Option<std::io::Result<LogPage>> {
        self.find(key)?;
        let deadline = tokio::time::Instant::now() + wait;
        let mut appended = self.logs.subscribe();
        loop {
            appended.borrow_and_update();
            let logs = self.logs.clone();
            let owned = key.to_owned();
            let page = tokio::task::spawn_blocking(move || logs.read(&owned, query))
                .await
                .unwrap_or_else(|err| Err(std::io::Error::other(err)));
            let waiting = page.as_ref().is_ok_and(|page| page.lines.is_empty())
                && tokio::time::Instant::now() < deadline
                && self.find(key).is_some();
            if !waiting {
                return Some(page);
            }
            if tokio::time::timeout_at(deadline, appended.changed())
                .await
                .is_err()
            {
                return Some(page);
            }
        }
    }

    /// Stops the workload and forgets it; a workload that does not exist is already deleted.
    /// Runs in a task of its own, so that it completes even if the request is dropped.
    pub(crate) async fn delete(self: &Arc<Self>, key: &str) -> Result<(), SupervisorError> {
        let supervisor = self.clone();
        let key = key.to_owned();
        tokio::spawn(async move { supervisor.delete_now(&key).await })
            .await
            .map_err(|err| SupervisorError::Internal(anyhow::anyhow!("delete task: {err}")))
    }

    async fn delete_now(&self, key: &str) {
        let Some(workload) = self.find(key) else {
            return;
        };
        workload.control.send_replace(Control::Stop);
        workload.wait_finished().await;
        network_remove(&workload).await;
        cgroup_remove(&workload).await;
        // Its files go while the key is still taken, so that a workload made again under the
        // same key cannot lose its new files to this deletion. (A concurrent delete of the
        // same workload removes them too: nothing is lost.)
        self.logs.remove(key);
        let work_dir = self.work_dir(key);
        if let Err(err) = tokio::fs::remove_dir_all(&work_dir).await
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(key, "removing {} failed: {err}", work_dir.display());
        }
        let removed = {
            let mut workloads = self.lock();
            match workloads.get(key) {
                Some(current) if Arc::ptr_eq(current, &workload) => workloads.remove(key),
                _ => None, // a concurrent delete got there first
            }
        };
        if removed.is_some() {
            // Its uid is free again: nothing runs as it any more (see `stop_process`).
            tracing::info!(key, "deleted the workload");
            self.persist().await;
            if workload.source.is_some() {
                self.sources_prune();
            }
        }
    }

    /// Ends supervision and leaves every process running, to be re-adopted by the next agent.
    pub(crate) async fn detach_all(&self) {
        self.end_all(Control::Detach).await;
    }

    /// Stops every workload's process. The workloads stay in the state file: the next agent
    /// on this data directory starts them again.
    pub(crate) async fn stop_all(&self) {
        self.end_all(Control::Stop).await;
    }

    async fn end_all(&self, control: Control) {
        let workloads: Vec<Arc<Workload>> = self.lock().values().cloned().collect();
        for workload in &workloads {
            workload.control.send_if_modified(|current| {
                let change = *current == Control::Run;
                if change {
                    *current = control;
                }
                change
            });
        }
        for workload in &workloads {
            workload.wait_finished().await;
            if control == Control::Stop {
                // Made again when the next agent starts it.
                network_remove(workload).await;
            }
        }
        self.persist().await;
    }

    fn work_dir(&self, key: &str) -> PathBuf {
        self.work_root.join(key)
    }

    /// [`Self::persist`] in a task of its own: the write happens even if the caller is dropped.
    async fn persist_detached(self: &Arc<Self>) {
        let supervisor = self.clone();
        let _ = tokio::spawn(async move { supervisor.persist().await }).await;
    }

    /// Writes the state file; a failure is logged (the workloads run on regardless, and the
    /// next change writes the file again).
    async fn persist(&self) {
        if let Err(err) = self
            .store
            .save(|| AgentState {
                workloads: self.lock().values().map(|w| w.record()).collect(),
                uid_next: match self.isolation {
                    Isolation::UserPerWorkload(_) => Some(
                        *self
                            .uid_next
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner()),
                    ),
                    Isolation::SameUser => None,
                },
            })
            .await
        {
            tracing::error!("saving the agent's state failed: {err:#}");
        }
    }

    /// Starts a process for `workload` and records it; `None` (and the workload `failed`)
    /// when it could not be started.
    async fn start_process(&self, workload: &Workload) -> Option<Process> {
        let process = self.spawn_process(workload);
        self.persist().await;
        process
    }

    /// [`Self::start_process`] without writing the state file: it does not wait, so it cannot
    /// be interrupted between starting the process and handing it to its monitor.
    fn spawn_process(&self, workload: &Workload) -> Option<Process> {
        let key = &workload.key;
        let spawned = self.spawn_as_workload(workload, &workload.argv);
        match spawned {
            Ok(child) => {
                let pid = child.id();
                let proc_start = pid.and_then(process::proc_info).map(|info| info.start_time);
                let oom_kills = workload
                    .cgroup
                    .as_ref()
                    .map_or(0, WorkloadCgroup::oom_kills);
                workload.update(|status| {
                    status.oom_kills = oom_kills;
                    status.generation += 1;
                    status.state = WorkloadState::Starting;
                    status.pid = pid;
                    status.proc_start = proc_start;
                    status.healthy = None;
                    status.started_at = Some(Utc::now());
                    status.since = Instant::now();
                    status.adopted = false;
                });
                let shown = pid.map_or_else(|| "unknown".to_owned(), |pid| pid.to_string());
                self.logs.note(
                    key,
                    &format!(
                        "started `{}` (pid {shown}, PORT={})",
                        workload.command, workload.host_port
                    ),
                );
                tracing::info!(key, pid, "workload process started");
                Some(Process::Child(child))
            }
            Err(err) => {
                let hint = match workload.uid {
                    Some(uid) if err.kind() == std::io::ErrorKind::PermissionDenied => format!(
                        " (it runs as uid {uid}: the program, and every directory on the way \
                         to it, must be readable and searchable by other users)"
                    ),
                    _ => String::new(),
                };
                let reason = format!("could not start `{}`: {err}{hint}", workload.argv[0]);
                workload.update(|status| {
                    status.generation += 1;
                    status.state = WorkloadState::Failed;
                    status.pid = None;
                    status.proc_start = None;
                    status.healthy = None;
                    status.last_exit = Some(reason.clone());
                });
                self.logs.note(key, &reason);
                tracing::warn!(key, "{reason}");
                None
            }
        }
    }

    /// Starts `argv` as `workload` would run: alone under its uid (whatever an earlier process
    /// left is killed), in its network namespace made afresh, in its directory (its code's,
    /// with a `source`), its output going to its log.
    fn spawn_as_workload(&self, workload: &Workload, argv: &[String]) -> std::io::Result<Child> {
        let work_dir = self.work_dir(&workload.key);
        work_dir_prepare(&work_dir, workload.uid)?;
        if let Some(uid) = workload.uid {
            isolation::uid_kill_all(uid)?;
        }
        let netns = workload
            .network
            .as_ref()
            .map(|network| {
                network
                    .create(workload.host_port)
                    .map_err(|err| std::io::Error::other(format!("{err:#}")))
                    .and_then(|()| network.open())
            })
            .transpose()?;
        let output = self.logs.open_outputs(&workload.key)?;
        let cgroup = match &workload.cgroup {
            Some(cgroup) => cgroup.join_files()?,
            None => Vec::new(),
        };
        let cwd = match workload.source {
            Some(_) => work_dir.join(crate::source::APP_DIR),
            None => work_dir.clone(),
        };
        process::spawn(Launch {
            argv,
            env: &workload.env,
            port: workload.host_port,
            work_dir: &work_dir,
            cwd: &cwd,
            output,
            uid: workload.uid,
            netns: netns.as_ref(),
            cgroup: &cgroup,
        })
    }

    /// The monitor of a workload resumed at agent start: adopts `adopt` when given.
    async fn monitor(self: Arc<Self>, workload: Arc<Workload>, adopt: Option<(u32, Option<u64>)>) {
        let first = match adopt {
            Some((pid, start_time)) => {
                self.logs.note(
                    &workload.key,
                    &format!("re-adopted pid {pid} after an agent restart"),
                );
                Some(Process::Adopted { pid, start_time })
            }
            None if !workload.status().prepared => {
                return self.monitor_prepared(workload).await;
            }
            None => self.start_process(&workload).await,
        };
        self.monitor_from(workload, first).await;
    }

    /// Supervises `workload` from its first process (`None`: it failed to start) until told
    /// to detach or stop.
    async fn monitor_from(self: Arc<Self>, workload: Arc<Workload>, first: Option<Process>) {
        let _finished = FinishedGuard(workload.clone());
        let key = workload.key.clone();
        let mut control = workload.control.subscribe();
        let mut backoff = Backoff::default();
        let mut current = first;
        loop {
            let delay = match current.as_mut() {
                Some(process) => {
                    let started = workload.status().since;
                    let pid = workload.status().pid;
                    let ended = tokio::select! {
                        ended = process.ended() => Ok(ended),
                        control = until_not_run(&mut control) => Err(control),
                    };
                    match ended {
                        Err(Control::Stop) => {
                            self.stop_process(&workload, process).await;
                            return;
                        }
                        Err(_) => return, // detach: leave it running
                        Ok(how) => {
                            let how = workload.out_of_memory(how);
                            // Whatever it left behind goes with it.
                            if let Some(pid) = pid {
                                process::signal_group(pid, Signal::SIGKILL);
                            }
                            leftovers_kill(&workload).await;
                            let delay = backoff.after_exit(started.elapsed());
                            workload.update(|status| {
                                status.generation += 1;
                                status.state = WorkloadState::Restarting;
                                status.restarts += 1;
                                status.pid = None;
                                status.proc_start = None;
                                status.healthy = None;
                                status.last_exit = Some(how.clone());
                            });
                            let message = format!("process {how}; restarting in {delay:?}");
                            self.logs.note(&key, &message);
                            tracing::warn!(key, "workload {message}");
                            self.persist().await;
                            delay
                        }
                    }
                }
                None => backoff.after_exit(Duration::ZERO),
            };
            if !self.backoff_wait(&workload, &mut control, delay).await {
                return;
            }
            current = self.start_process(&workload).await;
        }
    }

    /// Waits `delay` before another start; `false` when told to detach or stop meanwhile (the
    /// workload then marked stopped), which ends supervision.
    async fn backoff_wait(
        &self,
        workload: &Workload,
        control: &mut watch::Receiver<Control>,
        delay: Duration,
    ) -> bool {
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            control = until_not_run(control) => {
                if control == Control::Stop {
                    self.mark_stopped(workload);
                }
                false
            }
        }
    }

    /// Stops a running process: `SIGTERM` to its group, `SIGKILL` after [`STOP_GRACE`].
    async fn stop_process(&self, workload: &Workload, process: &mut Process) {
        let pid = workload.status().pid;
        if let Some(pid) = pid {
            self.logs
                .note(&workload.key, &format!("stopping pid {pid} (SIGTERM)"));
            process::signal_group(pid, Signal::SIGTERM);
            let ended = match tokio::time::timeout(STOP_GRACE, process.ended()).await {
                Ok(how) => how,
                Err(_) => {
                    self.logs.note(
                        &workload.key,
                        &format!("pid {pid} did not stop in {STOP_GRACE:?}: SIGKILL"),
                    );
                    process::signal_group(pid, Signal::SIGKILL);
                    tokio::time::timeout(STOP_GRACE, process.ended())
                        .await
                        .unwrap_or_else(|_| "did not end even after SIGKILL".into())
                }
            };
            // What outlived it, in its group or (under its uid) anywhere.
            process::signal_group(pid, Signal::SIGKILL);
            leftovers_kill(workload).await;
            tracing::info!(key = workload.key, pid, "workload process stopped: {ended}");
            workload.status().last_exit = Some(ended);
        }
        self.mark_stopped(workload);
    }

    fn mark_stopped(&self, workload: &Workload) {
        let mut status = workload.status();
        status.generation += 1;
        status.state = WorkloadState::Stopped;
        status.pid = None;
        status.proc_start = None;
        status.healthy = None;
    }

    /// Collects the workload's output into its log, until supervision ends (and once more
    /// then, for its last lines).
    async fn collect_output(self: Arc<Self>, workload: Arc<Workload>) {
        let mut control = workload.control.subscribe();
        loop {
            let ended = tokio::select! {
                () = tokio::time::sleep(logs::COLLECT_INTERVAL) => false,
                _ = until_not_run(&mut control) => true,
            };
            let logs = self.logs.clone();
            let key = workload.key.clone();
            let collected = tokio::task::spawn_blocking(move || logs.collect(&key))
                .await
                .unwrap_or_else(|err| Err(std::io::Error::other(err)));
            if let Err(err) = collected {
                tracing::warn!(
                    key = workload.key,
                    "collecting the workload's output failed: {err}"
                );
            }
            if ended {
                return;
            }
        }
    }

    /// Probes the workload's health, until supervision ends.
    async fn observe(self: Arc<Self>, workload: Arc<Workload>) {
        let mut control = workload.control.subscribe();
        loop {
            let interval = {
                let status = workload.status();
                if status.state == WorkloadState::Starting || status.healthy.is_none() {
                    PROBE_INTERVAL_STARTING
                } else {
                    PROBE_INTERVAL
                }
            };
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = until_not_run(&mut control) => return,
            }
            let Some(generation) = workload.probed_generation() else {
                continue;
            };
            let healthy = tokio::select! {
                healthy = health::probe(workload.host_port, health::PROBE_TIMEOUT) => healthy,
                _ = until_not_run(&mut control) => return,
            };
            let mut status = workload.status();
            if status.generation == generation {
                status.healthy = Some(healthy);
                if status.state == WorkloadState::Starting
                    && (healthy || status.since.elapsed() >= STARTUP_GRACE)
                {
                    status.state = WorkloadState::Running;
                }
            }
        }
    }
}

impl Supervisor {
    /// Makes the platform's health check of the workload at its interval, until supervision
    /// ends. Results of a process apply to it only: a new process starts `pending`.
    async fn check(self: Arc<Self>, workload: Arc<Workload>) {
        let Some(check) = workload.health_check.clone() else {
            return;
        };
        let mut control = workload.control.subscribe();
        let interval = Duration::from_millis(check.interval_ms.into());
        let timeout = Duration::from_millis(check.timeout_ms.into());
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = until_not_run(&mut control) => return,
            }
            let Some(generation) = workload.probed_generation() else {
                continue;
            };
            let passed = tokio::select! {
                passed = health::check(workload.host_port, &check.path, timeout) => passed,
                _ = until_not_run(&mut control) => return,
            };
            let mut status = workload.status();
            if status.generation != generation {
                continue;
            }
            if status.check.generation != generation {
                status.check = CheckState::fresh(generation);
            }
            let before = status.check.health;
            let after = status.check.record(passed, &check);
            if after != before {
                tracing::info!(
                    key = workload.key,
                    path = check.path,
                    ?before,
                    ?after,
                    "workload health changed"
                );
            }
        }
    }
}

/// Whether the process `pid` of workload `key` runs as the workload's `uid` (any user when it
/// has none). One that does not (it was started before the workload had a uid, or the range
/// changed) is killed, to be started again as its user.
fn runs_as_its_user(key: &str, pid: u32, uid: Option<u32>) -> bool {
    let Some(uid) = uid else { return true };
    let runs_as = process::proc_uid(pid);
    if runs_as == Some(uid) {
        return true;
    }
    tracing::warn!(
        key,
        pid,
        ?runs_as,
        uid,
        "the workload's process runs as another user: stopping it, to start it again as uid {uid}"
    );
    process::signal_group(pid, Signal::SIGKILL);
    false
}

/// Whether the process `pid` of workload `key` runs in the workload's network namespace. One
/// that does not (started by an agent that gave workloads no namespaces) is killed, to be
/// started again in its namespace.
fn runs_in_its_network(key: &str, pid: u32, network: &WorkloadNetwork) -> bool {
    if network.holds(pid) {
        return true;
    }
    tracing::warn!(
        key,
        pid,
        namespace = network.namespace(),
        "the workload's process is not in its network namespace: stopping it, to start it again there"
    );
    process::signal_group(pid, Signal::SIGKILL);
    false
}

/// Removes the workload's network namespace and its port's forwarding, once its process is
/// stopped.
async fn network_remove(workload: &Workload) {
    if let Some(network) = workload.network.clone() {
        let port = workload.host_port;
        let _ = tokio::task::spawn_blocking(move || network.remove(port)).await;
    }
}

/// The name of the cgroup of workload `key` running as `uid` (see `limits`): unique on the
/// machine, since no two agents share uids.
fn cgroup_name(key: &str, uid: Option<u32>) -> String {
    match uid {
        Some(uid) => format!("{key}-{uid}"),
        None => key.to_owned(),
    }
}

/// Removes the workload's cgroup (killing what still runs in it), once it is stopped.
async fn cgroup_remove(workload: &Arc<Workload>) {
    let workload = workload.clone();
    let removed = tokio::task::spawn_blocking(move || {
        workload
            .cgroup
            .as_ref()
            .map_or(Ok(()), WorkloadCgroup::remove)
            .map_err(|err| (workload.key.clone(), err))
    })
    .await;
    if let Ok(Err((key, err))) = removed {
        tracing::warn!(key, "removing the workload's cgroup failed: {err:#}");
    }
}

/// Makes `dir` the workload's own: created if missing, owned by its uid (when it has one),
/// mode 0700.
fn work_dir_prepare(dir: &Path, uid: Option<u32>) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => return Err(err),
        _ => {}
    }
    if let Some(uid) = uid {
        // Not following a symbolic link: the workload cannot make one there (`workloads` is the
        // agent's), but the agent does not rely on it.
        std::os::unix::fs::lchown(dir, Some(uid), Some(uid))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Kills every process that still runs as the workload's uid, when it has one: whatever its
/// process left behind, even outside its process group (a daemon that called `setsid`).
async fn leftovers_kill(workload: &Workload) {
    let Some(uid) = workload.uid else { return };
    let killed = tokio::task::spawn_blocking(move || isolation::uid_kill_all(uid))
        .await
        .unwrap_or_else(|err| Err(std::io::Error::other(err)));
    if let Err(err) = killed {
        tracing::warn!(
            key = workload.key,
            uid,
            "killing the processes left under the workload's uid failed: {err}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_resets_after_a_long_run() {
        let mut backoff = Backoff::default();
        let quick = Duration::from_secs(1);
        let delays: Vec<_> = (0..8).map(|_| backoff.after_exit(quick)).collect();
        assert_eq!(delays[0], Duration::from_millis(500));
        assert_eq!(delays[1], Duration::from_secs(1));
        assert_eq!(delays[2], Duration::from_secs(2));
        assert_eq!(delays[7], BACKOFF_MAX);
        assert_eq!(backoff.after_exit(BACKOFF_RESET_UPTIME), BACKOFF_INITIAL);
        assert_eq!(backoff.after_exit(quick), Duration::from_secs(1));
    }

    #[test]
    fn a_check_turns_healthy_after_its_passes_and_unhealthy_only_after_being_healthy() {
        let check = HealthCheck {
            path: "/".into(),
            interval_ms: 100,
            timeout_ms: 50,
            healthy_threshold: 2,
            unhealthy_threshold: 3,
        };
        let mut state = CheckState::fresh(1);
        let run = |state: &mut CheckState, results: &[bool]| -> Vec<CheckHealth> {
            results
                .iter()
                .map(|passed| state.record(*passed, &check))
                .collect()
        };
        use CheckHealth::{Healthy, Pending, Unhealthy};
        // Failures while starting keep it pending: it was never healthy.
        assert_eq!(run(&mut state, &[false; 5]), [Pending; 5]);
        assert_eq!(
            run(&mut state, &[true, false, true, true]),
            [Pending, Pending, Pending, Healthy]
        );
        assert_eq!(
            run(&mut state, &[false, false, true, false, false, false]),
            [Healthy, Healthy, Healthy, Healthy, Healthy, Unhealthy]
        );
        assert_eq!(run(&mut state, &[true, true]), [Unhealthy, Healthy]);
    }
}
