//! `/v1/projects/{project_id}/invitations` (inviting an email to a project) and
//! `/v1/me/invitations` (the caller's invitations, to accept or decline).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::created;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::app::App;
use crate::app::projects::invitations::{InvitationCreate, InvitationView};
use crate::app::projects::members::MemberView;
use crate::app::shared::pagination::{Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;
use crate::ids::ProjectId;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(invitation_list, invitation_create))
        .routes(routes!(invitation_revoke))
        .routes(routes!(me_invitation_list))
        .routes(routes!(me_invitation_accept))
        .routes(routes!(me_invitation_decline))
}

async fn views(
    app: &App,
    page: Page<crate::entity::project_invitation::Model>,
) -> AppResult<Page<InvitationView>> {
    Ok(Page {
        items: app.invitation_views(page.items).await?,
        next_cursor: page.next_cursor,
    })
}

/// A project's pending invitations (admins).
#[utoipa::path(get, path = "/v1/projects/{project_id}/invitations", tag = "members",
    params(("project_id" = Uuid, Path, description = "Project id"), PageParams),
    responses((status = 200, body = Page<InvitationView>)))]
async fn invitation_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<InvitationView>> {
    views(
        &app,
        app.invitation_list(&principal, project_id, params).await?,
    )
    .await
}

/// Invite an email to the project with a role (admins; owners to invite owners). The answer is
/// the same whether or not an account has this email; the user with it accepts at
/// `/v1/me/invitations/{invitation_id}/accept` within 7 days.
#[utoipa::path(post, path = "/v1/projects/{project_id}/invitations", tag = "members", request_body = InvitationCreate,
    params(("project_id" = Uuid, Path, description = "Project id")),
    responses((status = 201, body = InvitationView, headers(("Location" = String)))))]
async fn invitation_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiJson(create): ApiJson<InvitationCreate>,
) -> AppResult<Response> {
    let created = app.invitation_create(&ctx, project_id, create).await?;
    let invitation = app
        .invitation_views(vec![created])
        .await?
        .pop()
        .ok_or_else(|| crate::error::AppError::internal("no view of the new invitation"))?;
    let location = format!("/v1/projects/{project_id}/invitations/{}", invitation.id);
    let mut response = Json(invitation).into_response();
    *response.status_mut() = StatusCode::CREATED;
    if let Ok(location) = axum::http::HeaderValue::from_str(&location) {
        response
            .headers_mut()
            .insert(axum::http::header::LOCATION, location);
    }
    Ok(response)
}

/// Withdraw an invitation (admins; owners for owner invitations).
#[utoipa::path(delete, path = "/v1/projects/{project_id}/invitations/{invitation_id}", tag = "members",
    params(("project_id" = Uuid, Path, description = "Project id"), ("invitation_id" = Uuid, Path, description = "Invitation id")),
    responses((status = 204, description = "Withdrawn")))]
async fn invitation_revoke(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
) -> AppResult<StatusCode> {
    app.invitation_revoke(&ctx, project_id, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The caller's pending invitations.
#[utoipa::path(get, path = "/v1/me/invitations", tag = "members", params(PageParams),
    responses((status = 200, body = Page<InvitationView>)))]
async fn me_invitation_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<InvitationView>> {
    views(&app, app.me_invitation_list(&principal, params).await?).await
}

/// Accept an invitation: the caller becomes a member of its project with its role.
#[utoipa::path(post, path = "/v1/me/invitations/{invitation_id}/accept", tag = "members",
    params(("invitation_id" = Uuid, Path, description = "Invitation id")),
    responses((status = 201, body = MemberView, headers(("Location" = String), ("ETag" = String)))))]
async fn me_invitation_accept(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(id): ApiPath<Uuid>,
) -> AppResult<Response> {
    let member = app.me_invitation_accept(&ctx, id).await?;
    let location = format!(
        "/v1/projects/{}/members/{}",
        member.membership.project_id, member.view.user_id
    );
    Ok(created(location, member.membership.revision, member.view))
}

/// Decline an invitation.
#[utoipa::path(delete, path = "/v1/me/invitations/{invitation_id}", tag = "members",
    params(("invitation_id" = Uuid, Path, description = "Invitation id")),
    responses((status = 204, description = "Declined")))]
async fn me_invitation_decline(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(id): ApiPath<Uuid>,
) -> AppResult<StatusCode> {
    app.me_invitation_decline(&ctx, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
