//! `/v1/audit-events`: the audit log.

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::ApiQuery;
use crate::app::App;
use crate::app::shared::audit::{AuditEventView, AuditQuery};
use crate::app::shared::pagination::Page;
use crate::authz::Principal;
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(audit_event_list))
}

/// Read the audit log, oldest first (or newest first with `order=desc`), filtered by project,
/// action, resource type or actor: everything for administrators, a project's events for its
/// admins and owners (`project_id`), otherwise the caller's own actions.
#[utoipa::path(get, path = "/v1/audit-events", tag = "audit", params(AuditQuery), responses((status = 200, body = Page<AuditEventView>)))]
async fn audit_event_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> AppResult<Page<AuditEventView>> {
    app.audit_event_list(&principal, query).await
}
