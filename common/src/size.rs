//! The bounds of a workload's size (CPU and memory), in one place: the control plane checks
//! them when a service's spec is saved (within the narrower bounds its operator sets), plugins
//! are given sizes within them (contract 0.7.0's `instance-size`), and the host agent checks
//! them again when it is given a workload.

use std::ops::RangeInclusive;

/// CPU, in thousandths of a core (1000: one core or vCPU).
pub const CPU_MILLIS: RangeInclusive<u32> = 10..=256_000;
/// Memory, in MiB.
pub const MEMORY_MIB: RangeInclusive<u32> = 16..=4_194_304;

/// Checks both values against `cpu` and `memory` (the absolute bounds or narrower); the error
/// names the field (`{prefix}.cpu_millis`) and its bound.
pub fn size_check(
    prefix: &str,
    cpu_millis: u32,
    memory_mib: u32,
    cpu: RangeInclusive<u32>,
    memory: RangeInclusive<u32>,
) -> Result<(), String> {
    if !cpu.contains(&cpu_millis) {
        return Err(format!(
            "`{prefix}.cpu_millis` must be {} to {}",
            cpu.start(),
            cpu.end()
        ));
    }
    if !memory.contains(&memory_mib) {
        return Err(format!(
            "`{prefix}.memory_mib` must be {} to {}",
            memory.start(),
            memory.end()
        ));
    }
    Ok(())
}

/// Checks both values against the absolute bounds ([`CPU_MILLIS`], [`MEMORY_MIB`]).
pub fn size_check_absolute(prefix: &str, cpu_millis: u32, memory_mib: u32) -> Result<(), String> {
    size_check(prefix, cpu_millis, memory_mib, CPU_MILLIS, MEMORY_MIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_is_named() {
        assert!(size_check("size", 500, 512, CPU_MILLIS, MEMORY_MIB).is_ok());
        assert_eq!(
            size_check("size", 9, 512, CPU_MILLIS, MEMORY_MIB).unwrap_err(),
            "`size.cpu_millis` must be 10 to 256000"
        );
        assert_eq!(
            size_check("size", 500, 4096, CPU_MILLIS, 16..=2048).unwrap_err(),
            "`size.memory_mib` must be 16 to 2048"
        );
    }
}
