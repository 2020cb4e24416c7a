//! `/v1/projects/{project_id}/members`: who may act in a project, with which role. Members
//! join by accepting an invitation (`invitations`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::tagged;
use crate::app::App;
use crate::app::projects::members::{MemberUpdate, MemberView};
use crate::app::shared::pagination::{Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;
use crate::ids::ProjectId;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(member_list))
        .routes(routes!(member_view, member_update, member_remove))
}

/// List a project's members.
#[utoipa::path(get, path = "/v1/projects/{project_id}/members", tag = "members",
    params(("project_id" = Uuid, Path, description = "Project id"), PageParams),
    responses((status = 200, body = Page<MemberView>)))]
async fn member_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<MemberView>> {
    app.member_list(&principal, project_id, params).await
}

/// Get a member.
#[utoipa::path(get, path = "/v1/projects/{project_id}/members/{user_id}", tag = "members",
    params(("project_id" = Uuid, Path, description = "Project id"), ("user_id" = Uuid, Path, description = "The member's user id")),
    responses((status = 200, body = MemberView, headers(("ETag" = String)))))]
async fn member_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, user_id)): ApiPath<(ProjectId, Uuid)>,
) -> AppResult<Response> {
    let member = app.member_view(&principal, project_id, user_id).await?;
    Ok(tagged(member.membership.revision, member.view))
}

/// Change a member's role (admins; owners for owner roles). A project keeps at least one owner.
#[utoipa::path(patch, path = "/v1/projects/{project_id}/members/{user_id}", tag = "members", request_body = MemberUpdate,
    params(("project_id" = Uuid, Path, description = "Project id"), ("user_id" = Uuid, Path, description = "The member's user id"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = MemberView, headers(("ETag" = String)))))]
async fn member_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, user_id)): ApiPath<(ProjectId, Uuid)>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<MemberUpdate>,
) -> AppResult<Response> {
    let member = app
        .member_update(&ctx, project_id, user_id, if_match.as_deref(), update)
        .await?;
    Ok(tagged(member.membership.revision, member.view))
}

/// Remove a member (or leave the project). A project keeps at least one owner.
#[utoipa::path(delete, path = "/v1/projects/{project_id}/members/{user_id}", tag = "members",
    params(("project_id" = Uuid, Path, description = "Project id"), ("user_id" = Uuid, Path, description = "The member's user id"), ("If-Match" = Option<String>, Header)),
    responses((status = 204, description = "Removed")))]
async fn member_remove(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, user_id)): ApiPath<(ProjectId, Uuid)>,
    if_match: IfMatch,
) -> AppResult<StatusCode> {
    app.member_remove(&ctx, project_id, user_id, if_match.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
