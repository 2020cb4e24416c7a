//! `/v1/me` (the caller's account and terms status) and `/v1/users` (administration).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::identity::terms::{TermsAccept, TermsAcceptanceView, TermsStatus};
use crate::app::identity::users::{MeUpdate, UserCreate, UserUpdate, UserView};
use crate::app::projects::limits::LimitsView;
use crate::app::shared::pagination::{Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(me_view, me_update))
        .routes(routes!(me_limits))
        .routes(routes!(me_terms_status))
        .routes(routes!(me_terms_acceptance_list, me_terms_accept))
        .routes(routes!(user_list, user_create))
        .routes(routes!(user_view, user_update))
}

/// The per-user caps (projects owned, API tokens held) with what the caller holds of each.
#[utoipa::path(get, path = "/v1/me/limits", tag = "users", responses((status = 200, body = LimitsView)))]
async fn me_limits(State(app): State<App>, principal: Principal) -> AppResult<Json<LimitsView>> {
    Ok(Json(app.me_limits(&principal).await?))
}

/// The caller's own account.
#[utoipa::path(get, path = "/v1/me", tag = "users", responses((status = 200, body = UserView, headers(("ETag" = String)))))]
async fn me_view(State(app): State<App>, principal: Principal) -> AppResult<Response> {
    let user = app.me_view(&principal).await?;
    Ok(tagged(user.revision, UserView::from(user)))
}

/// Change the caller's name or password.
#[utoipa::path(patch, path = "/v1/me", tag = "users", request_body = MeUpdate,
    params(("If-Match" = Option<String>, Header)),
    responses((status = 200, body = UserView, headers(("ETag" = String)))))]
async fn me_update(
    State(app): State<App>,
    ctx: OpContext,
    if_match: IfMatch,
    ApiJson(update): ApiJson<MeUpdate>,
) -> AppResult<Response> {
    let user = app.me_update(&ctx, if_match.as_deref(), update).await?;
    Ok(tagged(user.revision, UserView::from(user)))
}

/// Whether the caller must accept the current terms of service.
#[utoipa::path(get, path = "/v1/me/terms", tag = "terms", responses((status = 200, body = TermsStatus)))]
async fn me_terms_status(
    State(app): State<App>,
    principal: Principal,
) -> AppResult<Json<TermsStatus>> {
    Ok(Json(app.terms_status(&principal).await?))
}

/// The caller's acceptances of terms of service, oldest first.
#[utoipa::path(get, path = "/v1/me/terms/acceptances", tag = "terms", params(PageParams),
    responses((status = 200, body = Page<TermsAcceptanceView>)))]
async fn me_terms_acceptance_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<TermsAcceptanceView>> {
    app.terms_acceptance_list(&principal, params).await
}

/// Accept the current terms of service. Accepting again returns the first acceptance (200).
#[utoipa::path(post, path = "/v1/me/terms/acceptances", tag = "terms", request_body = TermsAccept,
    responses((status = 201, body = TermsAcceptanceView), (status = 200, body = TermsAcceptanceView, description = "Already accepted")))]
async fn me_terms_accept(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(accept): ApiJson<TermsAccept>,
) -> AppResult<Response> {
    let (acceptance, created) = app.terms_accept(&ctx, accept).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(acceptance)).into_response())
}

/// List all users (administrators).
#[utoipa::path(get, path = "/v1/users", tag = "users", params(PageParams), responses((status = 200, body = Page<UserView>)))]
async fn user_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<UserView>> {
    Ok(app.user_list(&principal, params).await?.map(UserView::from))
}

/// Create a user (administrators).
#[utoipa::path(post, path = "/v1/users", tag = "users", request_body = UserCreate,
    responses((status = 201, body = UserView, headers(("Location" = String), ("ETag" = String)))))]
async fn user_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(create): ApiJson<UserCreate>,
) -> AppResult<Response> {
    let user = app.user_create(&ctx, create).await?;
    Ok(created(
        format!("/v1/users/{}", user.id),
        user.revision,
        UserView::from(user),
    ))
}

/// Get a user (administrators).
#[utoipa::path(get, path = "/v1/users/{user_id}", tag = "users", params(("user_id" = Uuid, Path, description = "User id")),
    responses((status = 200, body = UserView, headers(("ETag" = String)))))]
async fn user_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath(id): ApiPath<Uuid>,
) -> AppResult<Response> {
    let user = app.user_view(&principal, id).await?;
    Ok(tagged(user.revision, UserView::from(user)))
}

/// Change a user: name, password, administrator flag, disabled (administrators). Users are
/// disabled, never deleted, so that their records are kept.
#[utoipa::path(patch, path = "/v1/users/{user_id}", tag = "users", request_body = UserUpdate,
    params(("user_id" = Uuid, Path, description = "User id"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = UserView, headers(("ETag" = String)))))]
async fn user_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(id): ApiPath<Uuid>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<UserUpdate>,
) -> AppResult<Response> {
    let user = app
        .user_update(&ctx, id, if_match.as_deref(), update)
        .await?;
    Ok(tagged(user.revision, UserView::from(user)))
}
