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
use uuid::Uuid;

use crate::entity::{deployment, deployment_event};
use crate::error::{ApiError, ApiResult, ErrorCode};

/// One event of a deployment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentEventView {
    /// 1, 2, ... in the deployment; the `id` of the event in a stream (`Last-Event-ID`).
    pub seq: i64,
    /// E.g. `deployment.queued`, `instance.placed`, `instance.healthy`, `instance.failover`,
    /// `deployment.healthy`, `deployment.failed`.
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
    deployment_id: Uuid,
    kind: &str,
    message: String,
    details: serde_json::Value,
) -> ApiResult<i64> {
    deployment::Entity::update_many()
        .col_expr(
            deployment::Column::EventSeq,
            Expr::col(deployment::Column::EventSeq).add(1),
        )
        .filter(deployment::Column::Id.eq(deployment_id))
        .exec(db)
        .await?;
    let seq = deployment::Entity::find_by_id(deployment_id)
        .select_only()
        .column(deployment::Column::EventSeq)
        .into_tuple::<i64>()
        .one(db)
        .await?
        .ok_or_else(|| ApiError::internal("event of a missing deployment"))?;
    deployment_event::ActiveModel {
        deployment_id: Set(deployment_id),
        seq: Set(seq),
        kind: Set(kind.to_owned()),
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
    deployment_id: Uuid,
    after: Option<i64>,
    limit: u64,
) -> ApiResult<Vec<deployment_event::Model>> {
    Ok(deployment_event::Entity::find()
        .filter(deployment_event::Column::DeploymentId.eq(deployment_id))
        .filter(deployment_event::Column::Seq.gt(after.unwrap_or(0)))
        .order_by_asc(deployment_event::Column::Seq)
        .limit(limit)
        .all(db)
        .await?)
}

impl EventParams {
    pub fn limit(&self) -> ApiResult<u64> {
        match self.limit.unwrap_or(100) {
            limit @ 1..=200 => Ok(limit),
            _ => Err(ApiError::bad_request(
                ErrorCode::InvalidQuery,
                "`limit` must be between 1 and 200",
            )),
        }
    }
}
