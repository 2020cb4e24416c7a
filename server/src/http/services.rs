//! `/v1/projects/{project_id}/services`: services of a project.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::projects::services::{ServiceCreate, ServiceUpdate, ServiceView};
use crate::app::shared::pagination::{Page, PageParams, ViewPage};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;
use crate::ids::{ProjectId, ServiceId};

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(service_list, service_create))
        .routes(routes!(service_view, service_update, service_delete))
}

/// List a project's services.
#[utoipa::path(get, path = "/v1/projects/{project_id}/services", tag = "services",
    params(("project_id" = Uuid, Path, description = "Project id"), PageParams),
    responses((status = 200, body = Page<ServiceView>)))]
async fn service_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<ViewPage> {
    app.service_list(&principal, project_id, params).await
}

/// Create a service (members and above).
#[utoipa::path(post, path = "/v1/projects/{project_id}/services", tag = "services", request_body = ServiceCreate,
    params(("project_id" = Uuid, Path, description = "Project id")),
    responses((status = 201, body = ServiceView, headers(("Location" = String), ("ETag" = String)))))]
async fn service_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiJson(create): ApiJson<ServiceCreate>,
) -> AppResult<Response> {
    let service = app.service_create(&ctx, project_id, create).await?;
    Ok(created(
        format!("/v1/projects/{project_id}/services/{}", service.id),
        service.revision,
        ServiceView::try_from(service)?,
    ))
}

/// Get a service.
#[utoipa::path(get, path = "/v1/projects/{project_id}/services/{service_id}", tag = "services",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id")),
    responses((status = 200, body = ServiceView, headers(("ETag" = String)))))]
async fn service_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, id)): ApiPath<(ProjectId, ServiceId)>,
) -> AppResult<Response> {
    let service = app.service_view(&principal, project_id, id).await?;
    Ok(tagged(service.revision, ServiceView::try_from(service)?))
}

/// Change a service (members and above).
#[utoipa::path(patch, path = "/v1/projects/{project_id}/services/{service_id}", tag = "services", request_body = ServiceUpdate,
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = ServiceView, headers(("ETag" = String)))))]
async fn service_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, ServiceId)>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<ServiceUpdate>,
) -> AppResult<Response> {
    let service = app
        .service_update(&ctx, project_id, id, if_match.as_deref(), update)
        .await?;
    Ok(tagged(service.revision, ServiceView::try_from(service)?))
}

/// Delete a service and its domains (members and above).
#[utoipa::path(delete, path = "/v1/projects/{project_id}/services/{service_id}", tag = "services",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"), ("If-Match" = Option<String>, Header)),
    responses((status = 204, description = "Deleted")))]
async fn service_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, ServiceId)>,
    if_match: IfMatch,
) -> AppResult<StatusCode> {
    app.service_delete(&ctx, project_id, id, if_match.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
