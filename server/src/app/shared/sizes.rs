//! Sizes: what each instance of a service is given of its machine (CPU, memory), the bounds an
//! operator sets on them, and the size as the plugin contract carries it. Checked when a
//! service's spec is saved; given to providers when its instances are provisioned.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{AppError, AppResult};
use crate::plugins::InstanceSize;

/// What each instance of a service is given of its machine: a host agent holds it to that (a
/// cgroup), a cloud's plugin chooses the smallest machine type that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceSize {
    /// CPU, in thousandths of a core (1000: one vCPU). At least 10; at most the operator's
    /// maximum (8000 unless set), never more than 256000.
    #[schema(minimum = 10, maximum = 256000, example = 500)]
    pub cpu_millis: u32,
    /// Memory, in MiB. At least 16; at most the operator's maximum (16384 unless set), never
    /// more than 4194304.
    #[schema(minimum = 16, maximum = 4194304, example = 512)]
    pub memory_mib: u32,
}

impl ServiceSize {
    /// The size as the plugin contract gives it to a provider.
    pub fn to_contract(self) -> InstanceSize {
        InstanceSize {
            cpu_millis: self.cpu_millis,
            memory_mib: self.memory_mib,
        }
    }
}

impl std::fmt::Display for ServiceSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}m CPU, {} MiB", self.cpu_millis, self.memory_mib)
    }
}

/// The sizes an operator allows (`--service-size-default`, `--service-size-max`, or
/// `[service_sizes]` in the configuration file): the size of a service given none, and the
/// largest a service may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct ServiceSizes {
    /// A service given no size gets this one.
    pub default: ServiceSize,
    /// No service may ask for more CPU or memory than this.
    pub max: ServiceSize,
}

impl Default for ServiceSizes {
    fn default() -> Self {
        Self {
            default: ServiceSize {
                cpu_millis: 500,
                memory_mib: 512,
            },
            max: ServiceSize {
                cpu_millis: 8000,
                memory_mib: 16384,
            },
        }
    }
}

impl ServiceSizes {
    /// Checks `size` against the absolute bounds and this operator's maximum.
    pub fn check(&self, size: ServiceSize) -> AppResult<ServiceSize> {
        use bulkhead_common::size::{CPU_MILLIS, MEMORY_MIB, size_check};
        size_check(
            "size",
            size.cpu_millis,
            size.memory_mib,
            *CPU_MILLIS.start()..=self.max.cpu_millis,
            *MEMORY_MIB.start()..=self.max.memory_mib,
        )
        .map_err(AppError::invalid)?;
        Ok(size)
    }

    /// Checks the operator's own choice: the maximum within the absolute bounds, the default
    /// within the maximum.
    pub fn validate(&self) -> Result<(), String> {
        use bulkhead_common::size::{CPU_MILLIS, MEMORY_MIB, size_check, size_check_absolute};
        size_check_absolute(
            "service_sizes.max",
            self.max.cpu_millis,
            self.max.memory_mib,
        )?;
        size_check(
            "service_sizes.default",
            self.default.cpu_millis,
            self.default.memory_mib,
            *CPU_MILLIS.start()..=self.max.cpu_millis,
            *MEMORY_MIB.start()..=self.max.memory_mib,
        )
    }

    /// `CPU_MILLIS:MEMORY_MIB`, as the flags take a size.
    pub fn parse_size(text: &str) -> Result<ServiceSize, String> {
        let (cpu, memory) = text
            .split_once(':')
            .ok_or_else(|| format!("`{text}` is not CPU_MILLIS:MEMORY_MIB (e.g. 500:512)"))?;
        let number = |part: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{text}` is not CPU_MILLIS:MEMORY_MIB (e.g. 500:512)"))
        };
        Ok(ServiceSize {
            cpu_millis: number(cpu)?,
            memory_mib: number(memory)?,
        })
    }
}
