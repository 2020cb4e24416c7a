//! What happened to a deployment, numbered 1, 2, ... per deployment: written in the same
//! transaction as the change it records, listed page by page, and followed as an event stream.
//! Numbers come from the deployment's own row (`event_seq`, raised under its row lock), so that
//! an event committed later never carries a smaller number than one a reader already saw.
//!
//! Events name providers, regions, instance keys and addresses, and error kinds; never a
//! variable's value, and never the text a cloud answered (that is for administrators, in the
//! provider's events).

use chrono::Utc;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::app::webhooks::messages_enqueue;
use crate::entity::webhook_message::WebhookEventType;
use crate::entity::{deployment, deployment_event};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::DeploymentId;

/// What an event of a deployment records: a step of the deployment, or of one of its
/// instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum DeploymentEventKind {
    #[serde(rename = "deployment.queued")]
    DeploymentQueued,
    /// Instances are being placed.
    #[serde(rename = "deployment.placing")]
    DeploymentPlacing,
    /// No provider can take an instance yet (`details.needed`): placing is retried.
    #[serde(rename = "deployment.waiting")]
    DeploymentWaiting,
    #[serde(rename = "deployment.rolling_out")]
    DeploymentRollingOut,
    #[serde(rename = "deployment.healthy")]
    DeploymentHealthy,
    #[serde(rename = "deployment.failed")]
    DeploymentFailed,
    #[serde(rename = "deployment.cancelled")]
    DeploymentCancelled,
    /// A newer deployment of the service turned healthy.
    #[serde(rename = "deployment.superseded")]
    DeploymentSuperseded,
    #[serde(rename = "instance.placed")]
    InstancePlaced,
    /// A provider refused an instance and the next eligible one took it.
    #[serde(rename = "instance.failover")]
    InstanceFailover,
    /// An instance replaces one that stayed unhealthy or whose provider is evacuated.
    #[serde(rename = "instance.replacement")]
    InstanceReplacement,
    /// An instance waits for a provider that can take it.
    #[serde(rename = "instance.waiting")]
    InstanceWaiting,
    #[serde(rename = "instance.started")]
    InstanceStarted,
    #[serde(rename = "instance.healthy")]
    InstanceHealthy,
    #[serde(rename = "instance.unhealthy")]
    InstanceUnhealthy,
    #[serde(rename = "instance.failed")]
    InstanceFailed,
    #[serde(rename = "instance.draining")]
    InstanceDraining,
    #[serde(rename = "instance.removing")]
    InstanceRemoving,
    #[serde(rename = "instance.removed")]
    InstanceRemoved,
}

impl DeploymentEventKind {
    /// Every kind, in the order of the schema.
    pub const ALL: [Self; 19] = [
        Self::DeploymentQueued,
        Self::DeploymentPlacing,
        Self::DeploymentWaiting,
        Self::DeploymentRollingOut,
        Self::DeploymentHealthy,
        Self::DeploymentFailed,
        Self::DeploymentCancelled,
        Self::DeploymentSuperseded,
        Self::InstancePlaced,
        Self::InstanceFailover,
        Self::InstanceReplacement,
        Self::InstanceWaiting,
        Self::InstanceStarted,
        Self::InstanceHealthy,
        Self::InstanceUnhealthy,
        Self::InstanceFailed,
        Self::InstanceDraining,
        Self::InstanceRemoving,
        Self::InstanceRemoved,
    ];

    /// The name stored and shown (`deployment.queued`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::DeploymentQueued => "deployment.queued",
            Self::DeploymentPlacing => "deployment.placing",
            Self::DeploymentWaiting => "deployment.waiting",
            Self::DeploymentRollingOut => "deployment.rolling_out",
            Self::DeploymentHealthy => "deployment.healthy",
            Self::DeploymentFailed => "deployment.failed",
            Self::DeploymentCancelled => "deployment.cancelled",
            Self::DeploymentSuperseded => "deployment.superseded",
            Self::InstancePlaced => "instance.placed",
            Self::InstanceFailover => "instance.failover",
            Self::InstanceReplacement => "instance.replacement",
            Self::InstanceWaiting => "instance.waiting",
            Self::InstanceStarted => "instance.started",
            Self::InstanceHealthy => "instance.healthy",
            Self::InstanceUnhealthy => "instance.unhealthy",
            Self::InstanceFailed => "instance.failed",
            Self::InstanceDraining => "instance.draining",
            Self::InstanceRemoving => "instance.removing",
            Self::InstanceRemoved => "instance.removed",
        }
    }

    /// The webhook event this kind is, if webhooks carry it.
    pub fn webhook_event(self) -> Option<WebhookEventType> {
        Some(match self {
            Self::DeploymentQueued => WebhookEventType::DeploymentQueued,
            Self::DeploymentHealthy => WebhookEventType::DeploymentHealthy,
            Self::DeploymentFailed => WebhookEventType::DeploymentFailed,
            Self::DeploymentCancelled => WebhookEventType::DeploymentCancelled,
            Self::DeploymentSuperseded => WebhookEventType::DeploymentSuperseded,
            _ => return None,
        })
    }
}

/// One event of a deployment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentEventView {
    /// 1, 2, ... in the deployment; the `id` of the event in a stream (`Last-Event-ID`).
    pub seq: i64,
    /// Stored as its name; the stream's `event` field.
    #[schema(value_type = DeploymentEventKind)]
    pub kind: String,
    pub message: String,
    pub details: serde_json::Value,
    pub created_at: chrono::DateTime<Utc>,
}

impl From<deployment_event::Model> for DeploymentEventView {
    fn from(m: deployment_event::Model) -> Self {
        Self {
            seq: m.seq,
            kind: m.kind,
            message: m.message,
            details: m.details,
            created_at: m.created_at,
        }
    }
}

/// Paging of a deployment's events: after a sequence number.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventParams {
    /// Events after this sequence number (default: from the first).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Events per page, 1 to 200 (default 100).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
}

/// A page of events.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub items: Vec<DeploymentEventView>,
    /// Pass as `after` for the next page; absent when there are no more events yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<i64>,
}

/// Appends an event to `deployment_id` inside the caller's transaction; returns its number.
pub async fn event_append(
    db: &impl ConnectionTrait,
    deployment_id: DeploymentId,
    kind: DeploymentEventKind,
    message: String,
    details: serde_json::Value,
) -> AppResult<i64> {
    deployment::Entity::update_many()
        .col_expr(
            deployment::Column::EventSeq,
            Expr::col(deployment::Column::EventSeq).add(1),
        )
        .filter(deployment::Column::Id.eq(deployment_id))
        .exec(db)
        .await?;
    let seq = if let Some(event_type) = kind.webhook_event() {
        // An event that webhooks carry: the messages are owed in this transaction.
        let found = deployment::Entity::find_by_id(deployment_id)
            .one(db)
            .await?
            .ok_or_else(|| AppError::internal("event of a missing deployment"))?;
        messages_enqueue(db, &found, event_type, &message).await?;
        found.event_seq
    } else {
        deployment::Entity::find_by_id(deployment_id)
            .select_only()
            .column(deployment::Column::EventSeq)
            .into_tuple::<i64>()
            .one(db)
            .await?
            .ok_or_else(|| AppError::internal("event of a missing deployment"))?
    };
    deployment_event::ActiveModel {
        deployment_id: Set(deployment_id),
        seq: Set(seq),
        kind: Set(kind.as_str().to_owned()),
        message: Set(message),
        details: Set(details),
        created_at: Set(Utc::now()),
    }
    .insert(db)
    .await?;
    Ok(seq)
}

/// Events of `deployment_id` after `after`, at most `limit`, oldest first.
pub async fn events_after(
    db: &impl ConnectionTrait,
    deployment_id: DeploymentId,
    after: Option<i64>,
    limit: u64,
) -> AppResult<Vec<deployment_event::Model>> {
    Ok(deployment_event::Entity::find()
        .filter(deployment_event::Column::DeploymentId.eq(deployment_id))
        .filter(deployment_event::Column::Seq.gt(after.unwrap_or(0)))
        .order_by_asc(deployment_event::Column::Seq)
        .limit(limit)
        .all(db)
        .await?)
}

impl EventParams {
    pub fn limit(&self) -> AppResult<u64> {
        match self.limit.unwrap_or(100) {
            limit @ 1..=200 => Ok(limit),
            _ => Err(AppError::new(
                ErrorCode::InvalidQuery,
                "`limit` must be between 1 and 200",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_stored_by_its_schema_name() {
        let schema =
            serde_json::to_value(<DeploymentEventKind as utoipa::PartialSchema>::schema()).unwrap();
        let names: Vec<&str> = DeploymentEventKind::ALL
            .iter()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(schema["enum"], serde_json::json!(names));
        for kind in DeploymentEventKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
