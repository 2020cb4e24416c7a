//! `/v1/projects`: projects.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::projects::limits::LimitsView;
use crate::app::projects::{ProjectCreate, ProjectUpdate, ProjectView};
use crate::app::shared::pagination::{Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;
use crate::ids::ProjectId;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(project_list, project_create))
        .routes(routes!(project_view, project_update, project_delete))
        .routes(routes!(project_limits))
}

/// The per-project caps (environments, services, domains, members, ...) with what the project
/// holds of each (viewers and above).
#[utoipa::path(get, path = "/v1/projects/{project_id}/limits", tag = "projects",
    params(("project_id" = Uuid, Path, description = "Project id")),
    responses((status = 200, body = LimitsView)))]
async fn project_limits(
    State(app): State<App>,
    principal: Principal,
    ApiPath(project_id): ApiPath<ProjectId>,
) -> AppResult<Json<LimitsView>> {
    Ok(Json(app.project_limits(&principal, project_id).await?))
}

/// List the projects the caller is a member of (all projects for administrators).
#[utoipa::path(get, path = "/v1/projects", tag = "projects", params(PageParams),
    responses((status = 200, body = Page<ProjectView>)))]
async fn project_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<ProjectView>> {
    Ok(app
        .project_list(&principal, params)
        .await?
        .map(ProjectView::from))
}

/// Create a project; the caller becomes its owner.
#[utoipa::path(post, path = "/v1/projects", tag = "projects", request_body = ProjectCreate,
    responses((status = 201, body = ProjectView, headers(("Location" = String), ("ETag" = String)))))]
async fn project_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(create): ApiJson<ProjectCreate>,
) -> AppResult<Response> {
    let project = app.project_create(&ctx, create).await?;
    Ok(created(
        format!("/v1/projects/{}", project.id),
        project.revision,
        ProjectView::from(project),
    ))
}

/// Get a project.
#[utoipa::path(get, path = "/v1/projects/{project_id}", tag = "projects",
    params(("project_id" = Uuid, Path, description = "Project id")),
    responses((status = 200, body = ProjectView, headers(("ETag" = String)))))]
async fn project_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath(id): ApiPath<ProjectId>,
) -> AppResult<Response> {
    let project = app.project_view(&principal, id).await?;
    Ok(tagged(project.revision, ProjectView::from(project)))
}

/// Change a project (admins and owners).
#[utoipa::path(patch, path = "/v1/projects/{project_id}", tag = "projects", request_body = ProjectUpdate,
    params(("project_id" = Uuid, Path, description = "Project id"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = ProjectView, headers(("ETag" = String)))))]
async fn project_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(id): ApiPath<ProjectId>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<ProjectUpdate>,
) -> AppResult<Response> {
    let project = app
        .project_update(&ctx, id, if_match.as_deref(), update)
        .await?;
    Ok(tagged(project.revision, ProjectView::from(project)))
}

/// Delete a project and everything in it (owners).
#[utoipa::path(delete, path = "/v1/projects/{project_id}", tag = "projects",
    params(("project_id" = Uuid, Path, description = "Project id"), ("If-Match" = Option<String>, Header)),
    responses((status = 204, description = "Deleted")))]
async fn project_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(id): ApiPath<ProjectId>,
    if_match: IfMatch,
) -> AppResult<StatusCode> {
    app.project_delete(&ctx, id, if_match.as_deref()).await?;
    Ok(StatusCode::NO_CONTENT)
}
