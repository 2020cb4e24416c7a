//! Edges: each edge agent reports the routing-table revision it applied (with its API token,
//! which then owns that edge id), so that the fleet's convergence is visible: each edge's
//! revision, its lag behind the latest one, its last contact and its last refusal.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, EntityTrait, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::authz::{OpContext, Principal};
use crate::entity::edge;
use crate::error::{AppError, AppResult, ErrorCode};

/// What an edge agent reports.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeStatusReport {
    /// The revision the edge serves.
    #[schema(minimum = 0)]
    pub revision: i64,
    /// Seconds since that revision was generated (how stale the edge is).
    #[serde(default)]
    #[schema(minimum = 0)]
    pub snapshot_age_seconds: Option<f64>,
    /// The last snapshot the edge refused, if any.
    #[serde(default)]
    pub last_refusal: Option<EdgeRefusal>,
    /// The agent's version (at most 64 characters).
    #[serde(default)]
    #[schema(max_length = 64)]
    pub agent_version: Option<String>,
}

/// A snapshot an edge refused, and why.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeRefusal {
    #[schema(minimum = 0)]
    pub revision: i64,
    /// At most 500 characters.
    #[schema(max_length = 500)]
    pub reason: String,
}

/// An edge as the fleet view shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct EdgeView {
    pub id: String,
    pub revision: i64,
    /// Revisions behind the latest routing table.
    pub lag: i64,
    pub snapshot_age_seconds: Option<f64>,
    pub last_refusal: Option<EdgeRefusal>,
    pub agent_version: String,
    pub first_seen_at: DateTime<Utc>,
    /// The edge's last report.
    pub reported_at: DateTime<Utc>,
}

impl App {
    fn edge_view(&self, row: edge::Model) -> EdgeView {
        let latest = self.routing.current().map_or(0, |c| c.revision);
        EdgeView {
            lag: (latest - row.revision).max(0),
            last_refusal: row
                .last_refusal
                .and_then(|value| serde_json::from_value(value).ok()),
            id: row.id,
            revision: row.revision,
            snapshot_age_seconds: row.snapshot_age_seconds,
            agent_version: row.agent_version,
            first_seen_at: row.first_seen_at,
            reported_at: row.reported_at,
        }
    }

    /// Records what edge `id` reports (an API token with `routing:read`; the first token to
    /// report as `id` owns it).
    pub async fn edge_status_report(
        &self,
        principal: &Principal,
        id: &str,
        report: EdgeStatusReport,
    ) -> AppResult<EdgeView> {
        principal.require_routing_read()?;
        let token_id = principal.token_id().ok_or_else(|| {
            AppError::forbidden("edges report with an API token (scope `routing:read`)")
        })?;
        let id = crate::app::shared::validate::slug_validate("id", id)?;
        let latest = self.routing_current()?.revision;
        if !(0..=latest).contains(&report.revision) {
            return Err(AppError::invalid(format!(
                "`revision` must be 0 to {latest}, the latest routing table"
            )));
        }
        if report
            .snapshot_age_seconds
            .is_some_and(|age| !age.is_finite() || age < 0.0)
        {
            return Err(AppError::invalid(
                "`snapshot_age_seconds` must be a number of seconds, 0 or more",
            ));
        }
        let agent_version = match report.agent_version.as_deref() {
            None | Some("") => String::new(),
            Some(version) => {
                crate::app::shared::validate::text_validate("agent_version", version, 64)?
            }
        };
        let last_refusal = match report.last_refusal {
            None => None,
            Some(refusal) if refusal.revision < 0 => {
                return Err(AppError::invalid(
                    "`last_refusal.revision` must be 0 or more",
                ));
            }
            Some(refusal) => Some(EdgeRefusal {
                reason: crate::app::shared::validate::text_validate(
                    "last_refusal.reason",
                    &refusal.reason,
                    500,
                )?,
                revision: refusal.revision,
            }),
        };
        let txn = crate::db::begin_write(&self.db).await?;
        let existing = edge::Entity::find_by_id(id.clone()).one(&txn).await?;
        if existing.as_ref().is_some_and(|e| e.token_id != token_id) {
            return Err(AppError::new(
                ErrorCode::EdgeOwned,
                "another token reports as this edge",
            ));
        }
        let now = Utc::now();
        let row = edge::ActiveModel {
            id: Set(id),
            token_id: Set(token_id),
            revision: Set(report.revision),
            snapshot_age_seconds: Set(report.snapshot_age_seconds),
            last_refusal: Set(last_refusal
                .map(serde_json::to_value)
                .transpose()
                .map_err(AppError::internal)?),
            agent_version: Set(agent_version),
            first_seen_at: Set(existing.as_ref().map_or(now, |e| e.first_seen_at)),
            reported_at: Set(now),
        };
        let row = match existing {
            Some(_) => row.update(&txn).await?,
            None => row.insert(&txn).await?,
        };
        txn.commit().await?;
        Ok(self.edge_view(row))
    }

    /// Every edge that reported (`routing:read`).
    pub async fn edge_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<EdgeView>> {
        principal.require_routing_read()?;
        let page = paginate(
            &self.db,
            edge::Entity::find(),
            edge::Column::Id,
            |row| row.id.clone(),
            &params,
        )
        .await?;
        Ok(page.map(|row| self.edge_view(row)))
    }

    /// Forgets edge `id` (administrators): a decommissioned edge, or one whose token changed.
    pub async fn edge_delete(&self, ctx: &OpContext, id: &str) -> AppResult<()> {
        ctx.principal.require_admin()?;
        let id = crate::app::shared::validate::slug_validate("id", id)?;
        let txn = crate::db::begin_write(&self.db).await?;
        let deleted = edge::Entity::delete_by_id(id.clone()).exec(&txn).await?;
        if deleted.rows_affected == 0 {
            return Err(AppError::not_found("edge"));
        }
        audit_record(
            &txn,
            ctx,
            AuditEntry {
                action: "edge.delete",
                resource_type: "edge",
                resource_id: id,
                project_id: None,
                details: serde_json::json!({}),
            },
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }
}
