//! `/v1/projects/{project_id}/environments`: environments of a project.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::projects::environments::{EnvironmentView, EnvironmentWrite};
use crate::app::shared::pagination::{Page, PageParams, ViewPage};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;
use crate::ids::{EnvironmentId, ProjectId};

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(environment_list, environment_create))
        .routes(routes!(
            environment_view,
            environment_update,
            environment_delete
        ))
}

/// List a project's environments.
#[utoipa::path(get, path = "/v1/projects/{project_id}/environments", tag = "environments",
    params(("project_id" = Uuid, Path, description = "Project id"), PageParams),
    responses((status = 200, body = Page<EnvironmentView>)))]
async fn environment_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<ViewPage> {
    app.environment_list(&principal, project_id, params).await
}

/// Create an environment (members and above).
#[utoipa::path(post, path = "/v1/projects/{project_id}/environments", tag = "environments", request_body = EnvironmentWrite,
    params(("project_id" = Uuid, Path, description = "Project id")),
    responses((status = 201, body = EnvironmentView, headers(("Location" = String), ("ETag" = String)))))]
async fn environment_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiJson(create): ApiJson<EnvironmentWrite>,
) -> AppResult<Response> {
    let env = app.environment_create(&ctx, project_id, create).await?;
    Ok(created(
        format!("/v1/projects/{project_id}/environments/{}", env.id),
        env.revision,
        EnvironmentView::from(env),
    ))
}

/// Get an environment.
#[utoipa::path(get, path = "/v1/projects/{project_id}/environments/{environment_id}", tag = "environments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("environment_id" = Uuid, Path, description = "Environment id")),
    responses((status = 200, body = EnvironmentView, headers(("ETag" = String)))))]
async fn environment_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, id)): ApiPath<(ProjectId, EnvironmentId)>,
) -> AppResult<Response> {
    let env = app.environment_view(&principal, project_id, id).await?;
    Ok(tagged(env.revision, EnvironmentView::from(env)))
}

/// Rename an environment (members and above).
#[utoipa::path(patch, path = "/v1/projects/{project_id}/environments/{environment_id}", tag = "environments", request_body = EnvironmentWrite,
    params(("project_id" = Uuid, Path, description = "Project id"), ("environment_id" = Uuid, Path, description = "Environment id"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = EnvironmentView, headers(("ETag" = String)))))]
async fn environment_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, EnvironmentId)>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<EnvironmentWrite>,
) -> AppResult<Response> {
    let env = app
        .environment_update(&ctx, project_id, id, if_match.as_deref(), update)
        .await?;
    Ok(tagged(env.revision, EnvironmentView::from(env)))
}

/// Delete an environment without services (admins and owners).
#[utoipa::path(delete, path = "/v1/projects/{project_id}/environments/{environment_id}", tag = "environments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("environment_id" = Uuid, Path, description = "Environment id"), ("If-Match" = Option<String>, Header)),
    responses((status = 204, description = "Deleted")))]
async fn environment_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, EnvironmentId)>,
    if_match: IfMatch,
) -> AppResult<StatusCode> {
    app.environment_delete(&ctx, project_id, id, if_match.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
