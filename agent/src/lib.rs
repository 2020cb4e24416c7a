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
//! This module owns the settings and the agent's life (start, the data-directory lock,
//! serving, shutdown). The rest: `api` (routes, authentication, errors), `supervisor`
//! (workloads and their processes), `spec` (what a workload may be), `process` (OS processes and `/proc`), `health` (the HTTP
//! probe), `logs` (workload output files), `state` (the durable state file), `ports` (host
//! ports).

mod api;
mod health;
mod logs;
mod ports;
mod process;
mod spec;
mod state;
mod supervisor;

use std::fs::{File, OpenOptions};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use supervisor::{Capacity, WorkloadState, WorkloadView};

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
    /// Capacity: how many workloads the agent runs at most.
    pub slots: u32,
    /// The host put in workload addresses (`advertise_host:port`).
    pub advertise_host: String,
}

impl AgentSettings {
    /// Settings with the default capacity and advertised host.
    pub fn new(listen: SocketAddr, data_dir: PathBuf, token: impl Into<String>) -> Self {
        Self {
            listen,
            data_dir,
            token: token.into(),
            slots: DEFAULT_SLOTS,
            advertise_host: DEFAULT_ADVERTISE_HOST.into(),
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
            .field("advertise_host", &self.advertise_host)
            .finish()
    }
}

/// A running agent.
pub struct RunningAgent {
    /// The address the API listens on.
    pub addr: SocketAddr,
    supervisor: Arc<supervisor::Supervisor>,
    stop_serving: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    /// Held while the agent runs: one agent per data directory.
    _lock: Flock<File>,
}

/// Starts an agent: takes the data directory (one agent per directory), resumes the
/// workloads of its state file (re-adopting the processes that still run, starting the
/// others) and serves the API.
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
    let data_dir = &settings.data_dir;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating the data directory {}", data_dir.display()))?;
    let lock_path = data_dir.join("agent.lock");
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    let lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        anyhow::anyhow!(
            "another agent is using the data directory {} ({errno})",
            data_dir.display()
        )
    })?;

    let listener = TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("listening on {}", settings.listen))?;
    let addr = listener.local_addr()?;
    let supervisor =
        supervisor::Supervisor::open(data_dir, settings.slots, settings.advertise_host.clone())
            .await
            .with_context(|| format!("resuming the workloads of {}", data_dir.display()))?;
    let router = api::router(supervisor.clone(), &settings.token);
    let (stop_serving, mut stopped) = watch::channel(false);
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            })
            .await
    });
    tracing::info!(%addr, slots = settings.slots, data_dir = %data_dir.display(), "agent serving");
    Ok(RunningAgent {
        addr,
        supervisor,
        stop_serving,
        server,
        _lock: lock,
    })
}

impl RunningAgent {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and supervising, leaving the workloads running: the next agent on this
    /// data directory re-adopts them.
    pub async fn shutdown(self) {
        let supervisor = self.supervisor.clone();
        self.stop(async move { supervisor.detach_all().await })
            .await;
    }

    /// Stops serving and stops every workload's process (`SIGTERM`, then `SIGKILL` after 5 s).
    /// The workloads stay in the state file, so the next agent on this data directory starts
    /// them again.
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
        // The data-directory lock is released here, when `self` is dropped.
    }
}
