//! The `deployments` table: one deployment of a service's spec, and where it is in its life.

use sea_orm::entity::prelude::*;

use crate::ids::{DeploymentId, ProjectId, ServiceId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "deployments")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: DeploymentId,
    pub project_id: ProjectId,
    pub service_id: ServiceId,
    /// 1, 2, ... per service.
    pub number: i64,
    /// The service's spec when the deployment was made (secret values sealed).
    pub spec: Json,
    pub state: DeploymentState,
    /// Why it is in its state (for `failed`, `cancelled`, `superseded`).
    pub reason: String,
    /// The deployment whose spec this one deploys again (a rollback).
    pub rollback_of: Option<DeploymentId>,
    pub cancel_requested: bool,
    pub created_by: Option<Uuid>,
    /// The sequence number of its last event.
    pub event_seq: i64,
    pub revision: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub finished_at: Option<DateTimeUtc>,
    /// When all its instances first were healthy (a rollback goes back to such a deployment).
    pub healthy_at: Option<DateTimeUtc>,
    /// The push it was made from (`app::deploys::deployments::DeploymentPush`), if one.
    pub push: Option<Json>,
    /// The delivery (`git_deliveries.id`) it was made from: unique with the service.
    pub push_delivery_id: Option<Uuid>,
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
/// A deployment's state: in progress (`queued`, `placing`, `rolling_out`) or finished.
#[serde(rename_all = "snake_case")]
pub enum DeploymentState {
    Queued,
    Placing,
    RollingOut,
    Healthy,
    Failed,
    Cancelled,
    Superseded,
}

impl DeploymentState {
    /// States of a deployment that has not finished.
    pub const IN_PROGRESS: [Self; 3] = [Self::Queued, Self::Placing, Self::RollingOut];
    /// States of a deployment that has finished.
    pub const FINISHED: [Self; 4] = [
        Self::Healthy,
        Self::Failed,
        Self::Cancelled,
        Self::Superseded,
    ];

    pub fn is_finished(self) -> bool {
        Self::FINISHED.contains(&self)
    }
}

impl DeploymentState {
    /// The name stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Placing => "placing",
            Self::RollingOut => "rolling_out",
            Self::Healthy => "healthy",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Superseded => "superseded",
        }
    }
}

impl std::fmt::Display for DeploymentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
