//! Durable state: the workloads this agent runs, kept in `DATA_DIR/agent-state.json` so that a
//! restarted agent finds (and re-adopts) them. The file is rewritten whole on every change,
//! atomically (a temporary file, synced, then renamed over the old one), so a crash leaves
//! either the old or the new version, never a torn one. It holds every workload's environment
//! (secrets included): it is the agent's own, mode 0600, and workloads never run as its owner
//! (see `isolation`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The name of the state file inside the data directory.
pub(crate) const STATE_FILE: &str = "agent-state.json";

const FORMAT_VERSION: u32 = 1;

/// What the agent remembers of one workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WorkloadRecord {
    pub key: String,
    /// The command as given (split shell-style when started).
    pub command: String,
    pub env: BTreeMap<String, String>,
    /// The port the workload asked for (informational).
    pub port: u16,
    /// The host port the agent assigned (the workload's `PORT`).
    pub host_port: u16,
    /// The process (and process group) running it, if any.
    pub pid: Option<u32>,
    /// The process's start time (`/proc/PID/stat` field 22), to tell it from a reused pid.
    pub proc_start: Option<u64>,
    pub started_at: Option<DateTime<Utc>>,
    pub restarts: u32,
    pub created_at: DateTime<Utc>,
    /// The uid the workload runs as; none when workloads run as the agent's own user. Kept so
    /// that a restarted agent re-adopts the process under the same uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The platform's health check of it, when one was given (absent in older state files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<crate::spec::HealthCheck>,
    /// Where its code comes from (token included: this file holds secrets already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<crate::source::GitSource>,
    /// What it is given of the machine (absent in older state files: the default size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<crate::limits::WorkloadSize>,
    /// Whether its code was checked out and built (absent: it has no source, or was not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prepared: bool,
}

/// What the state file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AgentState {
    pub workloads: Vec<WorkloadRecord>,
    /// Where the search for a free workload uid starts: uids are handed out in turn, so that a
    /// released uid is given to another workload as late as possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid_next: Option<u32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    #[serde(flatten)]
    state: AgentState,
}

/// The state file, written by one writer at a time.
pub(crate) struct StateStore {
    path: PathBuf,
    write: tokio::sync::Mutex<()>,
}

impl StateStore {
    pub(crate) fn new(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(STATE_FILE),
            write: tokio::sync::Mutex::new(()),
        }
    }

    /// The state of the file; empty when it does not exist yet. A file that cannot be read or
    /// parsed is an error: starting empty would forget workloads that still run.
    pub(crate) fn load(&self) -> anyhow::Result<AgentState> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(AgentState::default());
            }
            Err(err) => {
                return Err(err).with_context(|| format!("reading {}", self.path.display()));
            }
        };
        let state: StateFile = serde_json::from_slice(&text)
            .with_context(|| format!("parsing {}", self.path.display()))?;
        anyhow::ensure!(
            state.version == FORMAT_VERSION,
            "{} has format version {}, this agent reads version {FORMAT_VERSION}",
            self.path.display(),
            state.version
        );
        Ok(state.state)
    }

    /// Writes the state that `snapshot` returns. The snapshot is taken while holding the
    /// writer's lock, so that the last write always carries the latest state.
    pub(crate) async fn save(&self, snapshot: impl FnOnce() -> AgentState) -> anyhow::Result<()> {
        let _writer = self.write.lock().await;
        let state = StateFile {
            version: FORMAT_VERSION,
            state: snapshot(),
        };
        let bytes = serde_json::to_vec_pretty(&state)?;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || bulkhead_common::files::write_atomically(&path, &bytes))
            .await
            .context("state writer task")?
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str) -> WorkloadRecord {
        WorkloadRecord {
            key: key.into(),
            command: "sleep 100".into(),
            env: BTreeMap::from([("A".into(), "1".into())]),
            port: 8080,
            host_port: 40000,
            pid: Some(42),
            proc_start: Some(7),
            started_at: Some(Utc::now()),
            restarts: 2,
            created_at: Utc::now(),
            uid: Some(60601),
            size: Some(crate::limits::WorkloadSize {
                cpu_millis: 250,
                memory_mib: 128,
            }),
            health_check: Some(crate::spec::HealthCheck {
                path: "/ready".into(),
                interval_ms: 1000,
                timeout_ms: 500,
                healthy_threshold: 2,
                unhealthy_threshold: 3,
            }),
            source: Some(crate::source::GitSource {
                url: "https://example.com/web.git".into(),
                commit: "a".repeat(40),
                token: Some("read".into()),
                build: Some("make".into()),
            }),
            prepared: true,
        }
    }

    #[tokio::test]
    async fn saves_and_loads_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path());
        assert_eq!(store.load().unwrap(), AgentState::default());
        let state = AgentState {
            workloads: vec![record("a"), record("b")],
            uid_next: Some(60602),
        };
        store.save(|| state.clone()).await.unwrap();
        assert_eq!(store.load().unwrap(), state);
        assert!(!dir.path().join("agent-state.json.tmp").exists());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join(STATE_FILE))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        store.save(AgentState::default).await.unwrap();
        assert!(store.load().unwrap().workloads.is_empty());
    }

    #[test]
    fn a_state_file_of_an_agent_without_uids_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = serde_json::to_value(record("a")).unwrap();
        old.as_object_mut().unwrap().remove("uid");
        let file = serde_json::json!({"version": 1, "workloads": [old]});
        std::fs::write(dir.path().join(STATE_FILE), file.to_string()).unwrap();
        let state = StateStore::new(dir.path()).load().unwrap();
        assert_eq!(state.workloads[0].uid, None);
        assert_eq!(state.uid_next, None);
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_an_empty_state() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STATE_FILE), "{not json").unwrap();
        let err = StateStore::new(dir.path()).load().unwrap_err();
        assert!(format!("{err:#}").contains("parsing"));
    }
}
