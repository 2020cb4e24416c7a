//! The audit log: one event for every mutation, written in the mutation's transaction, and
//! the rules for who may read which events.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::pagination::{ListOrder, Page, PageParams, paginate_ordered};
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::audit_event;
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::ProjectId;

/// What an audit event records about a change.
pub struct AuditEntry {
    /// `resource.verb`, e.g. `project.create`.
    pub action: &'static str,
    pub resource_type: &'static str,
    pub resource_id: String,
    pub project_id: Option<ProjectId>,
    /// Non-secret facts about the change (never secret values).
    pub details: serde_json::Value,
}

/// Writes `entry` for the operation `ctx`, inside the caller's transaction.
pub async fn audit_record(
    db: &impl ConnectionTrait,
    ctx: &OpContext,
    entry: AuditEntry,
) -> AppResult<()> {
    audit_event::ActiveModel {
        id: Set(Uuid::now_v7()),
        occurred_at: Set(Utc::now()),
        actor_user_id: Set(Some(ctx.principal.user_id())),
        actor_token_id: Set(ctx.principal.token_id()),
        action: Set(entry.action.into()),
        resource_type: Set(entry.resource_type.into()),
        resource_id: Set(entry.resource_id),
        project_id: Set(entry.project_id),
        request_id: Set(ctx.request_id.clone()),
        details: Set(entry.details),
    }
    .insert(db)
    .await?;
    Ok(())
}

/// Writes `entry` for a change the server made by itself (no user, no request), inside the
/// caller's transaction.
pub async fn audit_record_system(db: &impl ConnectionTrait, entry: AuditEntry) -> AppResult<()> {
    audit_event::ActiveModel {
        id: Set(Uuid::now_v7()),
        occurred_at: Set(Utc::now()),
        actor_user_id: Set(None),
        actor_token_id: Set(None),
        action: Set(entry.action.into()),
        resource_type: Set(entry.resource_type.into()),
        resource_id: Set(entry.resource_id),
        project_id: Set(entry.project_id),
        request_id: Set(String::new()),
        details: Set(entry.details),
    }
    .insert(db)
    .await?;
    Ok(())
}

/// One recorded mutation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditEventView {
    pub id: Uuid,
    pub occurred_at: DateTime<Utc>,
    /// The user who made the change.
    pub actor_user_id: Option<Uuid>,
    /// The API token used, if any.
    pub actor_token_id: Option<Uuid>,
    /// `resource.verb`, e.g. `project.create`.
    pub action: String,
    pub resource_type: String,
    pub resource_id: String,
    pub project_id: Option<Uuid>,
    pub request_id: String,
    pub details: serde_json::Value,
}

impl From<audit_event::Model> for AuditEventView {
    fn from(m: audit_event::Model) -> Self {
        Self {
            id: m.id,
            occurred_at: m.occurred_at,
            actor_user_id: m.actor_user_id,
            actor_token_id: m.actor_token_id,
            action: m.action,
            resource_type: m.resource_type,
            resource_id: m.resource_id,
            project_id: m.project_id.map(Into::into),
            request_id: m.request_id,
            details: m.details,
        }
    }
}

/// Filters of the audit log.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only events of this project (requires the project's admin or owner role).
    pub project_id: Option<Uuid>,
    /// Only events of this action, e.g. `deployment.create`.
    #[param(min_length = 1, max_length = 100)]
    pub action: Option<String>,
    /// Only events of this kind of resource, e.g. `service`.
    #[param(min_length = 1, max_length = 100)]
    pub resource_type: Option<String>,
    /// Only events of this user's actions.
    pub actor_user_id: Option<Uuid>,
    /// `asc` (oldest first, the default) or `desc` (newest first). A cursor continues the
    /// order it was given in.
    pub order: Option<ListOrder>,
    /// Items per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl App {
    /// Administrators read every event; a project's admins and owners read its events; everyone
    /// reads the events of their own actions.
    pub async fn audit_event_list(
        &self,
        principal: &Principal,
        query: AuditQuery,
    ) -> AppResult<Page<AuditEventView>> {
        principal.require_scope(Scope::Read)?;
        let mut select = audit_event::Entity::find();
        if let Some(project_id) = query.project_id {
            self.project_authorize(
                principal,
                ProjectId(project_id),
                ProjectRole::Admin,
                Scope::Read,
            )
            .await?;
            select = select.filter(audit_event::Column::ProjectId.eq(project_id));
        } else if !principal.is_admin() {
            select = select.filter(audit_event::Column::ActorUserId.eq(principal.user_id()));
        }
        for (name, value, column) in [
            ("action", &query.action, audit_event::Column::Action),
            (
                "resource_type",
                &query.resource_type,
                audit_event::Column::ResourceType,
            ),
        ] {
            if let Some(value) = value {
                if value.is_empty() || value.chars().count() > 100 {
                    return Err(AppError::new(
                        ErrorCode::InvalidQuery,
                        format!("`{name}` must be 1 to 100 characters"),
                    ));
                }
                select = select.filter(column.eq(value.as_str()));
            }
        }
        if let Some(actor) = query.actor_user_id {
            select = select.filter(audit_event::Column::ActorUserId.eq(actor));
        }
        let params = PageParams {
            limit: query.limit,
            cursor: query.cursor,
        };
        let order = query.order.unwrap_or_default();
        let page = paginate_ordered(
            &self.db,
            select,
            audit_event::Column::Id,
            |m| m.id,
            &params,
            order,
        )
        .await?;
        Ok(page.map(AuditEventView::from))
    }
}
