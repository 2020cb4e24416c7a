//! The Bulkhead host agent. It runs on each machine of the platform's own fleet and runs
//! workloads there as supervised processes, behind a small authenticated HTTP API that the
//! `metal` provider plugin speaks.
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! use bulkhead_agent::AgentSettings;
//!
//! let settings = AgentSettings::new(
//!     "127.0.0.1:7070".parse()?,
//!     "/var/lib/bulkhead-agent".into(),
//!     "the-fleet-agent-token-0001",
//! );
//! let agent = bulkhead_agent::start(settings).await?;
//! println!("serving on {}", agent.addr);
//! agent.shutdown().await; // the workloads keep running; the next agent re-adopts them
//! # Ok(())
//! # }
//! ```
//!
//! Run as root, the agent runs each workload as a user of its own (`isolation`), in a network
//! namespace of its own (`network`), held to its size by a cgroup of its own (`limits`); the
//! `bulkhead-agent` command ([`command`], also `bulkhead agent`) reads the token from a private
//! file.
//!
//! This module owns the settings and the agent's life (start, the data directory and its lock,
//! the choice of isolation, serving, shutdown). The rest: `api` (routes, authentication,
//! errors), `supervisor` (workloads and their processes), `capacity` (what the machine offers
//! workloads' sizes), `limits` (the cgroups that hold them to their sizes), `isolation` (who workloads run as),
//! `spec` (what a workload may be), `network` (workloads' namespaces and the host's
//! forwarding), `process` (OS processes and
//! `/proc`), `health` (the HTTP probe, and the platform's health checks of workloads, which
//! the agent makes near them and reports in each workload's `health`), `logs` (workload output files), `state` (the durable
//! state file), `ports` (host ports).
//!
//! The data directory is the agent user's: mode 0700, or 0711 when workloads run as other
//! users (they pass through it to their working directories, `workloads/KEY`, each owned by
//! its workload's uid, mode 0700, and cannot list it). Its state file, lock and `logs`
//! directory are owner-only (0600 files, a 0700 directory).

mod api;
pub mod capacity;
pub mod command;
mod health;
mod isolation;
mod limits;
mod logs;
mod network;
mod ports;
mod process;
mod source;
mod spec;
mod state;
mod supervisor;

use std::fs::{File, OpenOptions};
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use bulkhead_common::tls::server::ServerTls;

pub use capacity::{Allocatable, Capacity};
pub use isolation::{DEFAULT_WORKLOAD_UIDS, Isolation, UID_LOCK_FILE, UidRange, UidsTaken};
pub use limits::{CGROUP_PARENT, PIDS_MAX, ResourceLimits, WorkloadSize};
pub use network::{NetworkIsolation, WORKLOAD_NETWORK};
pub use source::{GitSource, SourceView};
pub use spec::HealthCheck;
pub use supervisor::{CheckHealth, WorkloadState, WorkloadView};

/// The number of workloads an agent runs at most unless told otherwise.
pub const DEFAULT_SLOTS: u32 = 16;
/// The host put in workload addresses unless told otherwise.
pub const DEFAULT_ADVERTISE_HOST: &str = "127.0.0.1";
/// The shortest token the agent accepts.
pub const MIN_TOKEN_LEN: usize = 16;

/// How an agent runs.
#[derive(Clone)]
pub struct AgentSettings {
    /// Where the API listens (port 0 picks one; see [`RunningAgent::addr`]).
    pub listen: SocketAddr,
    /// The state file, workload output and working directories live here.
    pub data_dir: PathBuf,
    /// The bearer token every API call (except `/healthz`) must present; 16+ characters.
    pub token: String,
    /// How many workloads the agent runs at most (one workload uid each).
    pub slots: u32,
    /// The CPU (thousandths of a core) its workloads' sizes may add up to; `None`: 1000 for
    /// each CPU of the machine (see [`capacity`]).
    pub cpu_millis: Option<u32>,
    /// The memory (MiB) its workloads' sizes may add up to; `None`: the machine's, less a
    /// reserve for the system and the agent.
    pub memory_mib: Option<u32>,
    /// The host put in workload addresses (`advertise_host:port`).
    pub advertise_host: String,
    /// The uids workloads run as, one each; at least as many as `slots`.
    pub workload_uids: UidRange,
    /// When the agent cannot switch users (it is not root), run the workloads as its own user
    /// instead of refusing to start. They can then read the agent's token, its state (every
    /// workload's environment) and the other workloads' logs: for a developer's machine only.
    /// An agent that can switch users isolates its workloads whatever this says.
    pub insecure_same_user: bool,
    /// When the agent could give workloads network namespaces of their own (it is root) but
    /// this machine lacks what they need (`ip`, `nft`), let them share the host's network
    /// instead of refusing to start. They can then reach each other, and every service of the
    /// host, over loopback: for a developer's machine only.
    pub insecure_shared_network: bool,
    /// When the agent could hold workloads to their sizes (it is root) but this machine does
    /// not let it make cgroups, run them unheld instead of refusing to start: one workload can
    /// then take the whole machine. For a developer's machine only.
    pub insecure_no_limits: bool,
    /// Serve the API over TLS with this certificate (re-read when its files change); `None`
    /// serves plain HTTP, for an agent reached over loopback or a private network only.
    pub tls: Option<ServerTls>,
}

impl AgentSettings {
    /// Settings with the default capacity, advertised host and workload uids, isolated.
    pub fn new(listen: SocketAddr, data_dir: PathBuf, token: impl Into<String>) -> Self {
        Self {
            listen,
            data_dir,
            token: token.into(),
            slots: DEFAULT_SLOTS,
            cpu_millis: None,
            memory_mib: None,
            advertise_host: DEFAULT_ADVERTISE_HOST.into(),
            workload_uids: DEFAULT_WORKLOAD_UIDS,
            insecure_same_user: false,
            insecure_shared_network: false,
            insecure_no_limits: false,
            tls: None,
        }
    }
}

impl std::fmt::Debug for AgentSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSettings")
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field("token", &"<redacted>")
            .field("slots", &self.slots)
            .field("cpu_millis", &self.cpu_millis)
            .field("memory_mib", &self.memory_mib)
            .field("advertise_host", &self.advertise_host)
            .field("workload_uids", &self.workload_uids)
            .field("insecure_same_user", &self.insecure_same_user)
            .field("insecure_shared_network", &self.insecure_shared_network)
            .field("insecure_no_limits", &self.insecure_no_limits)
            .field("tls", &self.tls)
            .finish()
    }
}

/// A running agent.
pub struct RunningAgent {
    /// The address the API listens on.
    pub addr: SocketAddr,
    /// What it offers its workloads' sizes.
    pub allocatable: Allocatable,
    /// Who its workloads run as.
    pub isolation: Isolation,
    /// What network its workloads have.
    pub network: NetworkIsolation,
    /// How its workloads are held to their sizes.
    pub limits: ResourceLimits,
    supervisor: Arc<supervisor::Supervisor>,
    stop_serving: watch::Sender<bool>,
    server: JoinHandle<anyhow::Result<()>>,
    /// Whether the API is served over TLS.
    tls: bool,
    /// Held while the agent runs: one agent per data directory.
    _lock: Flock<File>,
    /// Held while the agent runs: its workload uids are no other agent's.
    _uids_reserved: Option<File>,
}

/// Starts an agent: takes the data directory (one agent per directory), chooses who the
/// workloads run as (refusing to run them as its own user unless told
/// [`AgentSettings::insecure_same_user`]) and reserves its workload uids (an error that is a
/// [`UidsTaken`] when another agent of the machine holds some of them), resumes the workloads
/// of its state file (re-adopting the processes that still run, starting the others) and
/// serves the API.
pub async fn start(settings: AgentSettings) -> anyhow::Result<RunningAgent> {
    anyhow::ensure!(
        settings.token.chars().count() >= MIN_TOKEN_LEN,
        "the agent token must be at least {MIN_TOKEN_LEN} characters"
    );
    anyhow::ensure!(settings.slots >= 1, "the agent needs at least one slot");
    anyhow::ensure!(
        !settings.advertise_host.trim().is_empty(),
        "the advertised host must not be empty"
    );
    let data_dir = data_dir_open(&settings.data_dir)?;
    let lock_path = data_dir.join("agent.lock");
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    let lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        anyhow::anyhow!(
            "another agent is using the data directory {} ({errno})",
            data_dir.display()
        )
    })?;

    let isolation = isolation_decide(&settings, &data_dir)?;
    let uids_reserved = match isolation {
        Isolation::UserPerWorkload(uids) => Some(isolation::uids_reserve(uids)?),
        Isolation::SameUser => None,
    };
    let network = network_decide(&settings, isolation).await?;
    let insecure_no_limits = settings.insecure_no_limits;
    let limits =
        tokio::task::spawn_blocking(move || ResourceLimits::decide(isolation, insecure_no_limits))
            .await??;
    // Workloads of their own users pass through the data directory to their working
    // directories; nothing else in it is theirs to read.
    let data_dir_mode = match isolation {
        Isolation::UserPerWorkload(_) => 0o711,
        Isolation::SameUser => 0o700,
    };
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(data_dir_mode))?;

    let machine = Allocatable::this_machine().context("reading this machine's CPUs and memory")?;
    let allocatable = Allocatable {
        cpu_millis: settings.cpu_millis.unwrap_or(machine.cpu_millis),
        memory_mib: settings.memory_mib.unwrap_or(machine.memory_mib),
    };
    anyhow::ensure!(
        allocatable.cpu_millis >= 1 && allocatable.memory_mib >= 1,
        "the agent must offer its workloads some CPU and memory (it offers {allocatable})"
    );

    let listener = TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("listening on {}", settings.listen))?;
    let addr = listener.local_addr()?;
    let supervisor = supervisor::Supervisor::open(
        &data_dir,
        settings.slots,
        allocatable,
        settings.advertise_host.clone(),
        isolation,
        network,
        limits,
    )
    .await
    .with_context(|| format!("resuming the workloads of {}", data_dir.display()))?;
    let router = api::router(supervisor.clone(), &settings.token);
    let (stop_serving, mut stopped) = watch::channel(false);
    let tls = settings.tls.clone();
    if let Some(tls) = &tls {
        // Refused at start rather than at the first connection.
        tls.config_load()?;
    }
    let server = tokio::spawn(bulkhead_common::serve::serve(
        listener,
        router,
        tls.clone(),
        bulkhead_common::serve::ConnectionLimits::for_this_process(),
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        },
    ));
    tracing::info!(%addr, slots = settings.slots, %allocatable, data_dir = %data_dir.display(), %isolation, %network, %limits, "agent serving");
    Ok(RunningAgent {
        addr,
        allocatable,
        isolation,
        network,
        limits,
        supervisor,
        stop_serving,
        server,
        tls: tls.is_some(),
        _lock: lock,
        _uids_reserved: uids_reserved,
    })
}

/// [`start`] with the first block of `settings.slots` uids of `settings.workload_uids` that no
/// other agent of the machine holds. For agents that come and go beside others (`bulkhead
/// dev`, tests); not for the fleet's agents, which keep one range: a workload re-adopted after
/// a restart keeps its uid only if the range stays the same.
pub async fn start_in_free_uids(settings: AgentSettings) -> anyhow::Result<RunningAgent> {
    let range = settings.workload_uids;
    for block in range.blocks(settings.slots) {
        let mut attempt = settings.clone();
        attempt.workload_uids = block;
        match start(attempt).await {
            Err(err) if err.is::<UidsTaken>() => continue,
            result => return result,
        }
    }
    Err(UidsTaken { uids: range }.into())
}

/// Creates the data directory (owner-only) when it is missing, and checks that it is the
/// agent user's own: another user could change the state and logs under it. Its absolute path.
fn data_dir_open(data_dir: &Path) -> anyhow::Result<PathBuf> {
    if let Some(parent) = data_dir.parent() {
        // The directories above keep the usual mode: workloads may have to pass through them.
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating the directory {}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(data_dir) {
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(err)
                .with_context(|| format!("creating the data directory {}", data_dir.display()));
        }
        _ => {}
    }
    let data_dir = data_dir
        .canonicalize()
        .with_context(|| format!("resolving the data directory {}", data_dir.display()))?;
    let owner = std::fs::metadata(&data_dir)?.uid();
    let agent = nix::unistd::geteuid().as_raw();
    anyhow::ensure!(
        owner == agent,
        "the data directory {} belongs to uid {owner}, not to the agent's user (uid {agent})",
        data_dir.display()
    );
    Ok(data_dir)
}

/// Who the workloads run as: tries switching to the first workload uid (and reaching the data
/// directory as it), then decides (see [`isolation::isolation_choose`]).
fn isolation_decide(settings: &AgentSettings, data_dir: &Path) -> anyhow::Result<Isolation> {
    let uids = settings.workload_uids;
    let reach = data_dir.parent().unwrap_or(Path::new("/"));
    let probe = isolation::switch_probe(uids.first(), reach)
        .context("trying to switch a process to a workload uid")?;
    let isolation = isolation::isolation_choose(probe, uids, reach, settings.insecure_same_user)?;
    match isolation {
        Isolation::UserPerWorkload(uids) => anyhow::ensure!(
            uids.count() >= u64::from(settings.slots),
            "the {} slots need as many workload uids, and {uids} has {}",
            settings.slots,
            uids.count()
        ),
        Isolation::SameUser => tracing::warn!(
            "the agent cannot switch users (it is not root), and --insecure-same-user allows \
             running workloads as its own user: {isolation}"
        ),
    }
    Ok(isolation)
}

/// What network the workloads get: namespaces of their own when they run as users of their
/// own (the agent is root) and the machine has what they need; otherwise the host's, which a
/// root agent accepts only when told [`AgentSettings::insecure_shared_network`].
async fn network_decide(
    settings: &AgentSettings,
    isolation: Isolation,
) -> anyhow::Result<NetworkIsolation> {
    let Isolation::UserPerWorkload(uids) = isolation else {
        return Ok(NetworkIsolation::Shared); // not root: no namespaces (said with the users)
    };
    anyhow::ensure!(
        uids.count() <= network::WORKLOAD_BLOCKS,
        "the workload uids {uids} are more than the {} networks of {WORKLOAD_NETWORK}",
        network::WORKLOAD_BLOCKS
    );
    match tokio::task::spawn_blocking(network::host_prepare).await? {
        Ok(()) => Ok(NetworkIsolation::NamespacePerWorkload),
        Err(err) if settings.insecure_shared_network => {
            tracing::warn!(
                "workloads cannot have network namespaces of their own ({err:#}), and \
                 --insecure-shared-network allows sharing the host's: {}",
                NetworkIsolation::Shared
            );
            Ok(NetworkIsolation::Shared)
        }
        Err(err) => Err(anyhow::anyhow!(
            "the agent cannot give workloads network namespaces of their own: {err:#}. Without \
             them, workloads of different tenants reach each other, and every service of this \
             machine, over loopback; install iproute2 and nftables, or, to accept that risk (a \
             developer's machine), pass --insecure-shared-network"
        )),
    }
}

impl RunningAgent {
    /// `http://addr`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops serving and supervising, leaving the workloads running: the next agent on this
    /// data directory re-adopts them.
    pub async fn shutdown(self) {
        let supervisor = self.supervisor.clone();
        self.stop(async move { supervisor.detach_all().await })
            .await;
    }

    /// Stops serving and stops every workload's process (`SIGTERM`, then `SIGKILL` after 5 s),
    /// and removes their network namespaces. The workloads stay in the state file, so the next
    /// agent on this data directory starts them again.
    pub async fn shutdown_and_stop_workloads(self) {
        let supervisor = self.supervisor.clone();
        self.stop(async move { supervisor.stop_all().await }).await;
    }

    async fn stop(self, end_workloads: impl Future<Output = ()>) {
        let _ = self.stop_serving.send(true);
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!("the agent's server ended with an error: {err}"),
            Err(err) => tracing::warn!("the agent's server task failed: {err}"),
        }
        end_workloads.await;
        tracing::info!(addr = %self.addr, "agent stopped");
        // The data-directory lock and the uid reservation are released here, when `self` is
        // dropped.
    }
}

/// Fails the calling test, saying why, when the tests do not run as root: a test that needs
/// root must not pass by doing nothing.
#[cfg(test)]
pub(crate) fn test_require_root(why: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root: {why} (run the tests as root, as CI does)"
    );
}
