//! What a workload may use of its machine, and the cgroups that hold it to that.
//!
//! A workload has a size ([`WorkloadSize`]: CPU in thousandths of a core, memory in MiB). An
//! agent that runs workloads as users of their own (it is root) puts each workload's processes,
//! its build's included, in a cgroup of its own, `bulkhead/<key>-<uid>` at the top of the
//! machine's cgroup hierarchies (v1: `memory`, `cpu` and `pids`; v2: the unified one), made
//! with kata-containers' `cgroups-rs`:
//!
//! - **memory**: its size, with no swap on top. Past it the kernel's OOM killer kills a process
//!   of that workload, never one of another workload or of the agent; the agent tells such an
//!   end apart ([`WorkloadCgroup::oom_kills`]) and reports it as out of memory.
//! - **CPU**: a weight in proportion to its size (v1 `cpu.shares`, 1024 a core; v2 `cpu.weight`
//!   converted as runc does), which shares a busy core between workloads as their sizes say,
//!   and a quota of its size per 100 ms, its ceiling however idle the machine is.
//! - **processes**: at most [`PIDS_MAX`] tasks (threads included), which stops a fork bomb.
//!
//! A process joins its cgroup between fork and exec: the agent opens the cgroup's
//! `cgroup.procs` files before it forks, and the child writes `0` (itself) to each while it is
//! still root, so nothing it starts begins outside. A re-adopted process is still in its cgroup
//! (cgroups outlive the agent); a deleted workload's cgroup is emptied and removed.
//!
//! An agent that is not root (its workloads run as its own user: a developer's machine) cannot
//! make cgroups and holds nothing: [`ResourceLimits::NotEnforced`].

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use anyhow::Context;
use cgroups_rs::fs::cpu::CpuController;
use cgroups_rs::fs::memory::MemController;
use cgroups_rs::fs::pid::PidController;
use cgroups_rs::fs::{Cgroup, Controller, MaxValue, hierarchies};
use serde::{Deserialize, Serialize};

use crate::isolation::Isolation;

/// The most tasks (processes and threads) one workload may have.
pub const PIDS_MAX: i64 = 512;
/// Where workloads' cgroups are made, under the root of each hierarchy.
pub const CGROUP_PARENT: &str = "bulkhead";
/// The controllers a workload's cgroup uses.
const CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];
/// The period of the CPU quota, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// What a workload is given of its machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSize {
    /// CPU, in thousandths of a core (1000: one core).
    pub cpu_millis: u32,
    /// Memory, in MiB; no swap is given on top.
    pub memory_mib: u32,
}

impl WorkloadSize {
    /// The size of a workload given none (an older control plane's).
    pub const DEFAULT: Self = Self {
        cpu_millis: 500,
        memory_mib: 512,
    };
    pub(crate) fn validate(&self) -> Result<(), String> {
        bulkhead_common::size::size_check_absolute("size", self.cpu_millis, self.memory_mib)
    }

    fn memory_bytes(self) -> i64 {
        i64::from(self.memory_mib) * 1024 * 1024
    }

    /// The cgroup v1 `cpu.shares`: 1024 a core.
    fn cpu_shares(self) -> u64 {
        (u64::from(self.cpu_millis) * 1024 / 1000).max(2)
    }

    /// The cgroup v2 `cpu.weight` of those shares, as runc and the OCI runtimes convert it.
    fn cpu_weight(self) -> u64 {
        1 + ((self.cpu_shares() - 2) * 9999) / 262_142
    }

    /// Microseconds of CPU per [`CPU_PERIOD_US`].
    fn cpu_quota_us(self) -> i64 {
        i64::from(self.cpu_millis) * CPU_PERIOD_US as i64 / 1000
    }
}

impl std::fmt::Display for WorkloadSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}m CPU, {} MiB", self.cpu_millis, self.memory_mib)
    }
}

/// How an agent holds its workloads to their sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceLimits {
    /// A cgroup per workload in the v1 hierarchies (`memory`, `cpu`, `pids`).
    CgroupV1,
    /// A cgroup per workload in the unified (v2) hierarchy.
    CgroupV2,
    /// Not held: the agent is not root (a developer's machine, with `insecure_same_user`), or
    /// cannot make cgroups and was told `insecure_no_limits`.
    NotEnforced,
}

impl std::fmt::Display for ResourceLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::CgroupV1 => "each workload is held to its size by a cgroup of its own (v1)",
            Self::CgroupV2 => "each workload is held to its size by a cgroup of its own (v2)",
            Self::NotEnforced => {
                "workloads are NOT held to their sizes: one can take the whole machine"
            }
        })
    }
}

impl ResourceLimits {
    /// Cgroups for an agent that runs workloads as users of their own, once a probe cgroup
    /// was made, sized and removed; when it cannot be, an error saying why, or nothing when
    /// told `insecure_no_limits`. Nothing for an agent that runs them as its own user.
    pub(crate) fn decide(isolation: Isolation, insecure_no_limits: bool) -> anyhow::Result<Self> {
        if isolation == Isolation::SameUser {
            tracing::warn!("{}", Self::NotEnforced);
            return Ok(Self::NotEnforced);
        }
        let limits = if hierarchies::is_cgroup2_unified_mode() {
            Self::CgroupV2
        } else {
            Self::CgroupV1
        };
        // Unique to this start: agents of one process (tests, `bulkhead dev`) start at once.
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let probe = format!(
            "probe-{}-{}",
            std::process::id(),
            PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let made = WorkloadCgroup::make(limits, &probe, WorkloadSize::DEFAULT)
            .and_then(|cgroup| cgroup.remove());
        match made {
            Ok(()) => Ok(limits),
            Err(err) if insecure_no_limits => {
                tracing::warn!(
                    "workloads cannot be held to their sizes ({err:#}), and --insecure-no-limits \
                     allows running them unheld: {}",
                    Self::NotEnforced
                );
                Ok(Self::NotEnforced)
            }
            Err(err) => Err(anyhow::anyhow!(
                "the agent cannot hold workloads to their sizes: {err:#}. It needs the \
                 `memory`, `cpu` and `pids` cgroup controllers (v1 or v2) and the right to make \
                 cgroups under /sys/fs/cgroup; without them one workload could take the memory, \
                 CPU and processes of every other one. To accept that risk (a developer's \
                 machine), pass --insecure-no-limits"
            )),
        }
    }

    /// The cgroup of the workload `name` (made when missing) at `size`; `None` when sizes
    /// are not held.
    pub(crate) fn cgroup(
        self,
        name: &str,
        size: WorkloadSize,
    ) -> anyhow::Result<Option<WorkloadCgroup>> {
        match self {
            Self::NotEnforced => Ok(None),
            Self::CgroupV1 | Self::CgroupV2 => WorkloadCgroup::make(self, name, size).map(Some),
        }
    }
}

/// One workload's cgroup.
pub(crate) struct WorkloadCgroup {
    cgroup: Cgroup,
    v2: bool,
}

impl WorkloadCgroup {
    /// Makes (or finds) the cgroup `CGROUP_PARENT/name` and gives it `size`.
    fn make(limits: ResourceLimits, name: &str, size: WorkloadSize) -> anyhow::Result<Self> {
        let hierarchy = hierarchies::auto();
        let v2 = hierarchy.v2();
        anyhow::ensure!(
            v2 == (limits == ResourceLimits::CgroupV2),
            "the machine's cgroup hierarchy changed version"
        );
        let path = format!("{CGROUP_PARENT}/{name}");
        let controllers = CONTROLLERS.map(str::to_owned).to_vec();
        let cgroup = Cgroup::new_with_specified_controllers(hierarchy, &path, Some(controllers))
            .with_context(|| format!("making the cgroup {path}"))?;
        let made = Self { cgroup, v2 };
        made.size_set(size)
            .with_context(|| format!("sizing the cgroup {path} ({size})"))?;
        Ok(made)
    }

    fn size_set(&self, size: WorkloadSize) -> anyhow::Result<()> {
        let memory: &MemController = self
            .cgroup
            .controller_of()
            .context("no memory controller")?;
        let bytes = size.memory_bytes();
        if self.v2 {
            memory.set_limit(bytes)?;
            // Absent when the kernel has no swap accounting: then there is no swap to give.
            if memory.path().join("memory.swap.max").exists() {
                memory.set_memswap_limit(0)?;
            }
        } else if memory.path().join("memory.memsw.limit_in_bytes").exists() {
            // memory+swap: raised before the memory limit when growing, after it when
            // shrinking, since the kernel refuses memory+swap below memory.
            let current = memory.memory_stat().limit_in_bytes;
            if bytes >= current {
                memory.set_memswap_limit(bytes)?;
                memory.set_limit(bytes)?;
            } else {
                memory.set_limit(bytes)?;
                memory.set_memswap_limit(bytes)?;
            }
        } else {
            memory.set_limit(bytes)?;
        }
        let cpu: &CpuController = self.cgroup.controller_of().context("no cpu controller")?;
        cpu.set_shares(if self.v2 {
            size.cpu_weight()
        } else {
            size.cpu_shares()
        })?;
        cpu.set_cfs_quota_and_period(Some(size.cpu_quota_us()), Some(CPU_PERIOD_US))?;
        let pids: &PidController = self.cgroup.controller_of().context("no pids controller")?;
        pids.set_pid_max(MaxValue::Value(PIDS_MAX))?;
        Ok(())
    }

    /// The directories of the cgroup, one per hierarchy.
    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .cgroup
            .subsystems()
            .iter()
            .map(|subsystem| subsystem.to_controller().path().to_owned())
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// The `cgroup.procs` files of the cgroup, open for writing: a process started with them
    /// (see `process::spawn`) joins the cgroup before its program runs.
    pub(crate) fn join_files(&self) -> std::io::Result<Vec<File>> {
        self.dirs()
            .into_iter()
            .map(|dir| {
                OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))
            })
            .collect()
    }

    /// How many of the cgroup's processes the OOM killer has killed since it was made.
    pub(crate) fn oom_kills(&self) -> u64 {
        let Some(memory) = self.cgroup.controller_of::<MemController>() else {
            return 0;
        };
        if !self.v2 {
            return memory.memory_stat().oom_control.oom_kill;
        }
        std::fs::read_to_string(memory.path().join("memory.events"))
            .ok()
            .and_then(|events| {
                events.lines().find_map(|line| {
                    line.strip_prefix("oom_kill ")
                        .and_then(|count| count.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }

    /// The processes in the cgroup.
    pub(crate) fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .cgroup
            .procs()
            .into_iter()
            .filter_map(|pid| u32::try_from(pid.pid).ok())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Kills whatever still runs in the cgroup and removes it.
    pub(crate) fn remove(&self) -> anyhow::Result<()> {
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.cgroup
            .delete()
            .with_context(|| format!("removing the cgroup {}", self.cgroup.path()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bounded_and_converted() {
        assert!(WorkloadSize::DEFAULT.validate().is_ok());
        for bad in [
            WorkloadSize {
                cpu_millis: 9,
                memory_mib: 512,
            },
            WorkloadSize {
                cpu_millis: 500,
                memory_mib: 15,
            },
            WorkloadSize {
                cpu_millis: 256_001,
                memory_mib: 512,
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let core = WorkloadSize {
            cpu_millis: 1000,
            memory_mib: 64,
        };
        assert_eq!(core.cpu_shares(), 1024);
        // runc's conversion: 1024 shares are weight 39.
        assert_eq!(core.cpu_weight(), 39);
        assert_eq!(core.cpu_quota_us(), 100_000);
        assert_eq!(core.memory_bytes(), 64 << 20);
        let small = WorkloadSize {
            cpu_millis: 10,
            ..core
        };
        assert_eq!(small.cpu_shares(), 10);
        assert_eq!(small.cpu_quota_us(), 1000);
    }
}
