//! The `instances` table: each instance the reconciler makes for a deployment. Its key is
//! chosen and stored before its provider is called.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "instances")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub deployment_id: Uuid,
    pub service_id: Uuid,
    pub project_id: Uuid,
    #[sea_orm(unique)]
    pub instance_key: String,
    pub provider: String,
    pub region: String,
    /// `host:port` where the workload answers, once known.
    pub address: Option<String>,
    /// The provider's own id of it.
    pub provider_id: Option<String>,
    /// `pending`, `provisioning`, `starting`, `running`, `draining`, `removing`, `removed` or
    /// `failed` (see `app::deploys::instances`). Routes go to `running` instances whose `health` is
    /// `healthy`.
    pub state: String,
    /// `unknown`, `healthy` or `unhealthy`: from the control plane's own checks of the
    /// workload, never from the provider's API.
    pub health: String,
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
    pub replaces: Option<Uuid>,
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
