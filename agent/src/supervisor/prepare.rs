//! Preparing a workload built from a repository (see [`crate::source`]) before its first
//! start: its commit fetched (or found on the machine), checked out into its directory, its
//! build run there as the workload. A failure leaves the workload `failed` with the reason (in
//! `last_exit` and in its log) and is tried again after the backoff, like a command that cannot
//! start; the control plane fails the instance on seeing it. Once prepared (kept in the state
//! file), restarts run the command again without fetching or building.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{
    Backoff, Control, FinishedGuard, Supervisor, Workload, WorkloadState, leftovers_kill,
    until_not_run, work_dir_prepare,
};
use crate::process;
use crate::source::BUILD_TIMEOUT;

/// Kills a process group when dropped: a build abandoned (its workload stopped, its time up)
/// leaves nothing running.
struct GroupKill(Option<u32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            process::signal_group(pid, Signal::SIGKILL);
        }
    }
}

impl Supervisor {
    /// Prepares `workload`, again after each failure (with the backoff), then supervises it
    /// from its first start until told to detach or stop.
    pub(super) async fn monitor_prepared(self: Arc<Self>, workload: Arc<Workload>) {
        let _finished = FinishedGuard(workload.clone());
        let mut control = workload.control.subscribe();
        let mut backoff = Backoff::default();
        loop {
            workload.update(|status| status.state = WorkloadState::Preparing);
            // Dropping the preparation (the workload stopped) kills git and the build.
            let prepared = tokio::select! {
                prepared = self.prepare(&workload) => prepared,
                control = until_not_run(&mut control) => {
                    if control == Control::Stop {
                        leftovers_kill(&workload).await;
                        self.mark_stopped(&workload);
                    }
                    return;
                }
            };
            let Err(reason) = prepared else { break };
            let delay = backoff.after_exit(Duration::ZERO);
            workload.update(|status| {
                status.generation += 1;
                status.state = WorkloadState::Failed;
                status.last_exit = Some(reason.clone());
            });
            self.logs.note(
                &workload.key,
                &format!("{reason}; trying again in {delay:?}"),
            );
            tracing::warn!(
                key = workload.key,
                "preparing the workload failed: {reason}"
            );
            self.persist().await;
            if !self.backoff_wait(&workload, &mut control, delay).await {
                return;
            }
        }
        workload.update(|status| {
            status.prepared = true;
            status.last_exit = None;
        });
        let first = self.start_process(&workload).await;
        self.clone().monitor_from(workload.clone(), first).await;
    }

    /// Fetches, checks out and builds `workload`'s code; why not, for its owner.
    async fn prepare(&self, workload: &Workload) -> Result<(), String> {
        let source = workload
            .source
            .as_ref()
            .ok_or("the workload has no source")?;
        let key = workload.key.as_str();
        let started = Instant::now();
        self.logs.note(
            key,
            &format!("fetching commit {} from {}", source.commit, source.url),
        );
        let fetched = self.sources.fetch(source).await?;
        if fetched.cached {
            self.logs.note(
                key,
                "the commit is on this machine already: not fetched again",
            );
        } else {
            self.logs.note(
                key,
                &format!("fetched in {} ms", started.elapsed().as_millis()),
            );
        }
        let work_dir = self.work_dir(key);
        work_dir_prepare(&work_dir, workload.uid)
            .map_err(|err| format!("preparing the workload's directory failed: {err}"))?;
        // Nothing of an earlier attempt writes into the directory while it is replaced.
        leftovers_kill(workload).await;
        fetched
            .check_out(&source.commit, &work_dir, workload.uid)
            .await?;
        let (Some(build), Some(shown)) = (&workload.build_argv, &source.build) else {
            return Ok(());
        };
        self.logs.note(key, &format!("building: `{shown}`"));
        let started = Instant::now();
        let mut child = self
            .spawn_as_workload(workload, build)
            .map_err(|err| format!("could not start the build `{shown}`: {err}"))?;
        let group = GroupKill(child.id());
        let ended = tokio::time::timeout(BUILD_TIMEOUT, child.wait()).await;
        // Whatever it left behind, in its group or under the workload's uid, goes with it.
        drop(group);
        leftovers_kill(workload).await;
        match ended {
            Err(_) => Err(format!(
                "the build `{shown}` took more than {} s",
                BUILD_TIMEOUT.as_secs()
            )),
            Ok(Err(err)) => Err(format!("waiting for the build `{shown}` failed: {err}")),
            Ok(Ok(status)) if !status.success() => Err(format!(
                "the build `{shown}` failed: {}",
                process::describe_exit(status)
            )),
            Ok(Ok(_)) => {
                self.logs.note(
                    key,
                    &format!("built in {:.1} s", started.elapsed().as_secs_f64()),
                );
                Ok(())
            }
        }
    }

    /// Removes the cached repositories no workload uses any more.
    pub(super) fn sources_prune(&self) {
        let workloads = self.lock();
        let used: Vec<&str> = workloads
            .values()
            .filter_map(|workload| workload.source.as_ref())
            .map(|source| source.url.as_str())
            .collect();
        self.sources.prune(&used);
    }
}
