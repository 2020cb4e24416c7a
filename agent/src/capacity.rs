//! What an agent gives its workloads of the machine, and what their sizes take of it.
//!
//! Workloads are placed by size, not by count: an agent offers CPU (thousandths of a core) and
//! memory (MiB) — its [`Allocatable`] — and every workload it runs takes its whole size of
//! them, whether it uses it or not, as a cgroup holds it to that size (see
//! [`crate::ResourceLimits`]). A workload whose size does not fit in what is left is refused
//! (`409 capacity_exhausted`, saying what is free): the machine is never promised more than it
//! has, so one workload's peak cannot take what another was given.
//!
//! By default an agent offers its machine: 1000 for each CPU it may run on (which honours its
//! affinity and a CPU quota of its own cgroup), and the memory of `/proc/meminfo` less a
//! reserve for the system and the agent ([`memory_reserve_mib`]). An operator can say less
//! (a machine shared with other programs) or more (overcommitting on purpose) with
//! `--cpu-millis` and `--memory-mib`. The number of workloads is bounded apart from that by the
//! slots (one workload uid each).

use serde::Serialize;

use crate::limits::WorkloadSize;

/// What an agent offers its workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocatable {
    /// CPU, in thousandths of a core.
    pub cpu_millis: u32,
    /// Memory, in MiB.
    pub memory_mib: u32,
}

impl Allocatable {
    /// This machine's CPUs (those the agent may run on) and memory, less the memory reserve.
    pub fn this_machine() -> anyhow::Result<Self> {
        let cpus = std::thread::available_parallelism()?.get();
        let meminfo = std::fs::read_to_string("/proc/meminfo")?;
        let total_mib = meminfo_total_mib(&meminfo)
            .ok_or_else(|| anyhow::anyhow!("/proc/meminfo has no MemTotal line"))?;
        Ok(Self {
            cpu_millis: u32::try_from(cpus.saturating_mul(1000)).unwrap_or(u32::MAX),
            memory_mib: total_mib.saturating_sub(memory_reserve_mib(total_mib)),
        })
    }

    /// Whether `size` fits beside workloads that take `allocated` of it.
    pub(crate) fn fits(&self, allocated: Allocated, size: WorkloadSize) -> bool {
        let free = self.free(allocated);
        size.cpu_millis <= free.cpu_millis && size.memory_mib <= free.memory_mib
    }

    /// What is left beside `allocated` (nothing, not less, when more is allocated than
    /// offered: an operator lowered the offer under running workloads).
    pub(crate) fn free(&self, allocated: Allocated) -> Allocatable {
        Allocatable {
            cpu_millis: self.cpu_millis.saturating_sub(allocated.cpu_millis),
            memory_mib: self.memory_mib.saturating_sub(allocated.memory_mib),
        }
    }
}

impl std::fmt::Display for Allocatable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}m CPU and {} MiB", self.cpu_millis, self.memory_mib)
    }
}

/// What workloads' sizes take, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Allocated {
    pub cpu_millis: u32,
    pub memory_mib: u32,
}

impl Allocated {
    pub(crate) fn sum(sizes: impl IntoIterator<Item = WorkloadSize>) -> Self {
        sizes.into_iter().fold(Self::default(), |sum, size| Self {
            cpu_millis: sum.cpu_millis.saturating_add(size.cpu_millis),
            memory_mib: sum.memory_mib.saturating_add(size.memory_mib),
        })
    }
}

/// An agent's slots, CPU and memory: what it offers, what its workloads take, what is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capacity {
    pub slots_total: u32,
    pub slots_used: u32,
    pub slots_free: u32,
    pub cpu_millis_total: u32,
    pub cpu_millis_allocated: u32,
    pub cpu_millis_free: u32,
    pub memory_mib_total: u32,
    pub memory_mib_allocated: u32,
    pub memory_mib_free: u32,
}

impl Capacity {
    pub(crate) fn new(slots: u32, used: u32, offered: Allocatable, allocated: Allocated) -> Self {
        let free = offered.free(allocated);
        Self {
            slots_total: slots,
            slots_used: used,
            slots_free: slots.saturating_sub(used),
            cpu_millis_total: offered.cpu_millis,
            cpu_millis_allocated: allocated.cpu_millis,
            cpu_millis_free: free.cpu_millis,
            memory_mib_total: offered.memory_mib,
            memory_mib_allocated: allocated.memory_mib,
            memory_mib_free: free.memory_mib,
        }
    }
}

/// The memory kept from workloads for the kernel, the system's services and the agent: a
/// tenth of the machine's, at least 256 MiB and at most 2 GiB (a kubelet's eviction threshold
/// and system reservation are of that order).
pub fn memory_reserve_mib(total_mib: u32) -> u32 {
    (total_mib / 10).clamp(256, 2048).min(total_mib)
}

/// `MemTotal` of `/proc/meminfo`'s text, in MiB.
fn meminfo_total_mib(meminfo: &str) -> Option<u32> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then(|| u32::try_from(kib / 1024).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: WorkloadSize = WorkloadSize {
        cpu_millis: 500,
        memory_mib: 512,
    };

    #[test]
    fn sizes_fit_only_in_what_is_free() {
        let offered = Allocatable {
            cpu_millis: 2000,
            memory_mib: 1536,
        };
        let two = Allocated::sum([SIZE, SIZE]);
        assert_eq!(
            two,
            Allocated {
                cpu_millis: 1000,
                memory_mib: 1024
            }
        );
        assert!(offered.fits(two, SIZE));
        let three = Allocated::sum([SIZE, SIZE, SIZE]);
        // CPU is left (500m), memory is not.
        assert!(!offered.fits(three, SIZE));
        assert!(!offered.fits(
            Allocated::default(),
            WorkloadSize {
                cpu_millis: 2001,
                memory_mib: 16
            }
        ));
        // More allocated than offered (the offer was lowered): nothing is free.
        let capacity = Capacity::new(16, 4, offered, Allocated::sum([SIZE; 4]));
        assert_eq!(
            (
                capacity.cpu_millis_free,
                capacity.memory_mib_free,
                capacity.slots_free
            ),
            (0, 0, 12)
        );
    }

    #[test]
    fn the_machine_is_read_and_a_reserve_kept() {
        let meminfo = "MemTotal:       24592324 kB\nMemFree:        1000 kB\n";
        assert_eq!(meminfo_total_mib(meminfo), Some(24015));
        assert_eq!(meminfo_total_mib("MemFree: 1 kB\n"), None);
        assert_eq!(memory_reserve_mib(24015), 2048);
        assert_eq!(memory_reserve_mib(4096), 409);
        assert_eq!(memory_reserve_mib(1024), 256);
        assert_eq!(memory_reserve_mib(100), 100);
        let here = Allocatable::this_machine().unwrap();
        assert!(here.cpu_millis >= 1000 && here.memory_mib > 0, "{here:?}");
    }
}
