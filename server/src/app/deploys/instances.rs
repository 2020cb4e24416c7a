//! The life of a deployed instance, as the reconciler drives it and the API shows it:
//!
//! ```text
//! pending ─► provisioning ─► starting ─► running ─► draining ─► removing ─► removed
//!    │             │             │                                 ▲
//!    └─────────────┴─────────────┴──► failed (refused or never healthy) ┘
//! ```
//!
//! A `failed` instance is also removed at its provider (its key may exist there). Routes go to
//! `running` instances whose `health` is `healthy`; `draining` instances have left the routes
//! and are removed after a grace period.

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, Condition};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::entity::instance;

pub const PENDING: &str = "pending";
pub const PROVISIONING: &str = "provisioning";
pub const STARTING: &str = "starting";
pub const RUNNING: &str = "running";
pub const DRAINING: &str = "draining";
pub const REMOVING: &str = "removing";
pub const REMOVED: &str = "removed";
pub const FAILED: &str = "failed";

pub const HEALTH_UNKNOWN: &str = "unknown";
pub const HEALTH_HEALTHY: &str = "healthy";
pub const HEALTH_UNHEALTHY: &str = "unhealthy";

/// States of an instance that is being made or runs (it counts as one of its deployment's).
pub const ACTIVE: [&str; 4] = [PENDING, PROVISIONING, STARTING, RUNNING];
/// States of an instance that still exists, or may, at its provider.
pub const LIVE: [&str; 7] = [
    PENDING,
    PROVISIONING,
    STARTING,
    RUNNING,
    DRAINING,
    REMOVING,
    FAILED,
];

/// Instances that still exist, or may, at their provider.
pub fn live() -> Condition {
    Condition::all().add(instance::Column::State.is_in(LIVE))
}

/// An instance of a deployment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeployedInstanceView {
    pub instance_key: String,
    pub deployment_id: Uuid,
    pub provider: String,
    pub region: String,
    /// `host:port` where the workload answers, once known.
    pub address: Option<String>,
    /// `pending`, `provisioning`, `starting`, `running`, `draining`, `removing`, `removed` or
    /// `failed`.
    #[schema(value_type = crate::app::shared::states::DeployedInstanceState)]
    pub state: String,
    /// `unknown`, `healthy` or `unhealthy`, from the control plane's checks of the workload.
    #[schema(value_type = crate::app::shared::states::DeployedInstanceHealth)]
    pub health: String,
    pub health_checked_at: Option<DateTime<Utc>>,
    /// The key of the instance this one took over from (failover, evacuation).
    pub replaces: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DeployedInstanceView {
    /// `replaces_key` is the key of the instance `m.replaces` names.
    pub fn new(m: instance::Model, replaces_key: Option<String>) -> Self {
        Self {
            instance_key: m.instance_key,
            deployment_id: m.deployment_id,
            provider: m.provider,
            region: m.region,
            address: m.address,
            state: m.state,
            health: m.health,
            health_checked_at: m.health_checked_at,
            replaces: replaces_key,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// A new instance key for deployment `number` of `service_name`: short, readable, random
/// enough to be unique (a collision is refused by the database and retried).
pub fn instance_key_new(service_name: &str, number: i64) -> String {
    use rand::Rng;
    let prefix: String = service_name.chars().take(40).collect();
    let prefix = prefix.trim_end_matches('-');
    let suffix: String = (0..8)
        .map(|_| {
            let n = rand::rng().random_range(0..36u8);
            char::from(if n < 10 { b'0' + n } else { b'a' + n - 10 })
        })
        .collect();
    format!("{prefix}-d{number}-{suffix}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_are_valid_and_distinct() {
        let long = "a".repeat(63);
        let a = super::instance_key_new(&long, 123_456);
        let b = super::instance_key_new("web", 3);
        assert!(a.len() <= 63 && a.starts_with('a'), "{a}");
        assert!(b.starts_with("web-d3-"), "{b}");
        assert_ne!(b, super::instance_key_new("web", 3));
        assert!(crate::app::shared::validate::slug_validate("k", &a).is_ok());
    }
}
