//! The `instances` table: each instance the reconciler makes for a deployment. Its key is
//! chosen and stored before its provider is called.

use sea_orm::entity::prelude::*;

use crate::ids::{DeploymentId, InstanceId, ProjectId, ServiceId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "instances")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: InstanceId,
    pub deployment_id: DeploymentId,
    pub service_id: ServiceId,
    pub project_id: ProjectId,
    #[sea_orm(unique)]
    pub instance_key: String,
    pub provider: String,
    pub region: String,
    /// `host:port` where the workload answers, once known.
    pub address: Option<String>,
    /// The provider's own id of it.
    pub provider_id: Option<String>,
    /// See `app::deploys::instances`. Routes go to `running` instances whose `health` is
    /// `healthy`.
    pub state: InstanceState,
    /// From the control plane's own checks of the workload (or a host agent's near it), never
    /// from the provider's API.
    pub health: InstanceHealth,
    pub health_checked_at: Option<DateTimeUtc>,
    /// Consecutive passed (positive) or failed (negative) health checks.
    pub health_streak: i32,
    /// Provider calls made for its current step.
    pub attempts: i32,
    /// No provider call for it before this.
    pub next_attempt_at: Option<DateTimeUtc>,
    pub last_error: String,
    /// The instance this one takes over from (failover, evacuation): that one is drained and
    /// removed once this one is healthy.
    pub replaces: Option<InstanceId>,
    /// The reconciler working on it, until `claimed_until`.
    pub claimed_by: Option<String>,
    pub claimed_until: Option<DateTimeUtc>,
    /// Its turn among the instances waiting for a provider operation (see
    /// `app::deploys::queue`): lower goes first.
    pub dispatch_order: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    EnumIter,
    DeriveActiveEnum,
    Serialize,
    Deserialize,
    ToSchema,
)]
#[sea_orm(
    rs_type = "String",
    db_type = "String(StringLen::None)",
    rename_all = "snake_case"
)]
/// The state of an instance of a deployment.
#[serde(rename_all = "snake_case")]
#[schema(as = DeployedInstanceState)]
pub enum InstanceState {
    Pending,
    Provisioning,
    Starting,
    Running,
    Draining,
    Removing,
    Removed,
    Failed,
}

impl InstanceState {
    /// States of an instance that is being made or runs (it counts as one of its deployment's).
    pub const ACTIVE: [Self; 4] = [
        Self::Pending,
        Self::Provisioning,
        Self::Starting,
        Self::Running,
    ];
    /// States of an instance that still exists, or may, at its provider.
    pub const LIVE: [Self; 7] = [
        Self::Pending,
        Self::Provisioning,
        Self::Starting,
        Self::Running,
        Self::Draining,
        Self::Removing,
        Self::Failed,
    ];

    pub fn is_active(self) -> bool {
        Self::ACTIVE.contains(&self)
    }
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    EnumIter,
    DeriveActiveEnum,
    Serialize,
    Deserialize,
    ToSchema,
)]
#[sea_orm(
    rs_type = "String",
    db_type = "String(StringLen::None)",
    rename_all = "snake_case"
)]
/// The health of an instance of a deployment, from the checks of its workload.
#[serde(rename_all = "snake_case")]
#[schema(as = DeployedInstanceHealth)]
pub enum InstanceHealth {
    Unknown,
    Healthy,
    Unhealthy,
}

impl InstanceState {
    /// The name stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Provisioning => "provisioning",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Draining => "draining",
            Self::Removing => "removing",
            Self::Removed => "removed",
            Self::Failed => "failed",
        }
    }
}

impl std::fmt::Display for InstanceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl InstanceHealth {
    /// The name stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
        }
    }
}

impl std::fmt::Display for InstanceHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
