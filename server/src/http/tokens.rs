//! `/v1/tokens`: the caller's API tokens.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::app::App;
use crate::app::identity::tokens::{TokenCreate, TokenCreated, TokenView};
use crate::app::shared::pagination::{Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(token_list, token_create))
        .routes(routes!(token_view, token_revoke))
}

/// List the caller's API tokens (never their values).
#[utoipa::path(get, path = "/v1/tokens", tag = "tokens", params(PageParams), responses((status = 200, body = Page<TokenView>)))]
async fn token_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<TokenView>> {
    app.token_list(&principal, params).await
}

/// Create an API token. Its secret value is in this response only.
#[utoipa::path(post, path = "/v1/tokens", tag = "tokens", request_body = TokenCreate,
    responses((status = 201, body = TokenCreated, headers(("Location" = String)))))]
async fn token_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(create): ApiJson<TokenCreate>,
) -> AppResult<Response> {
    let created = app.token_create(&ctx, create).await?;
    let location = format!("/v1/tokens/{}", created.token.id);
    Ok((
        StatusCode::CREATED,
        [
            (header::LOCATION, location),
            (header::CACHE_CONTROL, "no-store".into()),
        ],
        Json(created),
    )
        .into_response())
}

/// Get one of the caller's API tokens.
#[utoipa::path(get, path = "/v1/tokens/{token_id}", tag = "tokens", params(("token_id" = Uuid, Path, description = "Token id")),
    responses((status = 200, body = TokenView)))]
async fn token_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath(id): ApiPath<Uuid>,
) -> AppResult<Json<TokenView>> {
    Ok(Json(app.token_view(&principal, id).await?))
}

/// Revoke one of the caller's API tokens.
#[utoipa::path(delete, path = "/v1/tokens/{token_id}", tag = "tokens", params(("token_id" = Uuid, Path, description = "Token id")),
    responses((status = 204, description = "Revoked")))]
async fn token_revoke(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(id): ApiPath<Uuid>,
) -> AppResult<StatusCode> {
    app.token_revoke(&ctx, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
