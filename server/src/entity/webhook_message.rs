//! The `webhook_messages` table: each event owed to an endpoint, and its delivery.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_messages")]
pub struct Model {
    /// Sent as `webhook-id: msg_<id without dashes>`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub event_type: WebhookEventType,
    /// The JSON body, exactly as signed and sent.
    pub payload: String,
    pub state: WebhookMessageState,
    pub attempts: i32,
    pub next_attempt_at: DateTimeUtc,
    /// The HTTP status of the last attempt, if it got one.
    pub last_status: Option<i32>,
    pub last_error: String,
    pub created_at: DateTimeUtc,
    pub delivered_at: Option<DateTimeUtc>,
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
/// The event types an endpoint can receive.
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum WebhookEventType {
    #[sea_orm(string_value = "deployment.queued")]
    #[serde(rename = "deployment.queued")]
    DeploymentQueued,
    #[sea_orm(string_value = "deployment.healthy")]
    #[serde(rename = "deployment.healthy")]
    DeploymentHealthy,
    #[sea_orm(string_value = "deployment.failed")]
    #[serde(rename = "deployment.failed")]
    DeploymentFailed,
    #[sea_orm(string_value = "deployment.cancelled")]
    #[serde(rename = "deployment.cancelled")]
    DeploymentCancelled,
    #[sea_orm(string_value = "deployment.superseded")]
    #[serde(rename = "deployment.superseded")]
    DeploymentSuperseded,
}

impl WebhookEventType {
    /// The type as messages and endpoints name it, e.g. `deployment.queued`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::DeploymentQueued => "deployment.queued",
            Self::DeploymentHealthy => "deployment.healthy",
            Self::DeploymentFailed => "deployment.failed",
            Self::DeploymentCancelled => "deployment.cancelled",
            Self::DeploymentSuperseded => "deployment.superseded",
        }
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
/// Where in its delivery a message is.
#[serde(rename_all = "snake_case")]
pub enum WebhookMessageState {
    /// Not yet accepted by the endpoint; `next_attempt_at` says when it is tried.
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// Every attempt of the schedule failed, or the endpoint's address was refused
    /// (`last_error`); replay it to try again.
    Failed,
}
