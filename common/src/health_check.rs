//! The bounds of a workload's health check, in one place: the control plane checks them when
//! a service's spec is saved, and the host agent again when it is given a workload (a check
//! that passed one and not the other would fail a deploy on metal only).

use std::ops::RangeInclusive;

/// The longest path, in bytes.
pub const PATH_MAX: usize = 200;
/// Milliseconds between checks.
pub const INTERVAL_MS: RangeInclusive<u64> = 100..=60_000;
/// Milliseconds a check may take.
pub const TIMEOUT_MS: RangeInclusive<u64> = 50..=30_000;
/// Consecutive passes (or failures) that change an instance's health.
pub const THRESHOLD: RangeInclusive<u32> = 1..=10;
/// Seconds a new instance has to become healthy (the control plane's; an agent is not told).
pub const START_TIMEOUT_SECS: RangeInclusive<u32> = 1..=3600;

/// A health check's values, as either side holds them.
#[derive(Debug, Clone, Copy)]
pub struct HealthCheckValues<'a> {
    pub path: &'a str,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
    /// The control plane's start timeout; `None` where it is not known (the agent).
    pub start_timeout_secs: Option<u32>,
}

/// Whether `path` may be requested: it starts with `/`, and is at most [`PATH_MAX`] visible
/// ASCII characters without `#` (a fragment is never sent; a request line holds nothing else).
pub fn path_valid(path: &str) -> bool {
    path.starts_with('/')
        && path.len() <= PATH_MAX
        && path
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && byte != b'#')
}

impl HealthCheckValues<'_> {
    /// Checks every bound; the error names the field and its bound.
    pub fn check(&self) -> Result<(), &'static str> {
        let checks = [
            (
                path_valid(self.path),
                "`health_check.path` must start with `/`: at most 200 visible ASCII characters, without `#`",
            ),
            (
                INTERVAL_MS.contains(&self.interval_ms),
                "`health_check.interval_ms` must be 100 to 60000",
            ),
            (
                TIMEOUT_MS.contains(&self.timeout_ms),
                "`health_check.timeout_ms` must be 50 to 30000",
            ),
            (
                THRESHOLD.contains(&self.healthy_threshold),
                "`health_check.healthy_threshold` must be 1 to 10",
            ),
            (
                THRESHOLD.contains(&self.unhealthy_threshold),
                "`health_check.unhealthy_threshold` must be 1 to 10",
            ),
            (
                self.start_timeout_secs
                    .is_none_or(|secs| START_TIMEOUT_SECS.contains(&secs)),
                "`health_check.start_timeout_secs` must be 1 to 3600",
            ),
        ];
        match checks.into_iter().find(|(ok, _)| !ok) {
            Some((_, message)) => Err(message),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(path: &str) -> HealthCheckValues<'_> {
        HealthCheckValues {
            path,
            interval_ms: 2000,
            timeout_ms: 1000,
            healthy_threshold: 1,
            unhealthy_threshold: 3,
            start_timeout_secs: Some(120),
        }
    }

    #[test]
    fn bounds_are_checked_at_their_edges() {
        assert_eq!(values("/healthz?deep=1").check(), Ok(()));
        for path in ["healthz", "/a b", "/a#b", "/é", ""] {
            assert!(values(path).check().is_err(), "{path:?}");
        }
        assert!(values(&format!("/{}", "a".repeat(199))).check().is_ok());
        assert!(values(&format!("/{}", "a".repeat(200))).check().is_err());
        let edges = [
            (
                HealthCheckValues {
                    interval_ms: 99,
                    ..values("/")
                },
                false,
            ),
            (
                HealthCheckValues {
                    interval_ms: 60_000,
                    ..values("/")
                },
                true,
            ),
            (
                HealthCheckValues {
                    timeout_ms: 49,
                    ..values("/")
                },
                false,
            ),
            (
                HealthCheckValues {
                    healthy_threshold: 11,
                    ..values("/")
                },
                false,
            ),
            (
                HealthCheckValues {
                    unhealthy_threshold: 0,
                    ..values("/")
                },
                false,
            ),
            (
                HealthCheckValues {
                    start_timeout_secs: Some(0),
                    ..values("/")
                },
                false,
            ),
            (
                HealthCheckValues {
                    start_timeout_secs: None,
                    ..values("/")
                },
                true,
            ),
        ];
        for (check, valid) in edges {
            assert_eq!(check.check().is_ok(), valid, "{check:?}");
        }
    }
}
