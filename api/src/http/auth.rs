//! `/v1/auth`: password login, token refresh and logout. These endpoints are public: they are
//! how a caller gets a credential.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::ApiJson;
use crate::app::App;
use crate::app::sessions::{LoginRequest, RefreshRequest, SessionTokens};
use crate::error::ApiResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(session_login))
        .routes(routes!(session_refresh))
        .routes(routes!(session_logout))
}

/// Log in with email and password: returns a short-lived access token and a refresh token.
#[utoipa::path(post, path = "/v1/auth/login", tag = "auth", security(()), request_body = LoginRequest,
    responses((status = 200, body = SessionTokens)))]
async fn session_login(
    State(app): State<App>,
    ApiJson(login): ApiJson<LoginRequest>,
) -> ApiResult<Json<SessionTokens>> {
    let request_id = super::middleware::current_request_id().unwrap_or_default();
    Ok(Json(app.session_login(login, &request_id).await?))
}

/// Exchange a refresh token for new tokens. Each refresh token works once; reusing one revokes
/// the whole session.
#[utoipa::path(post, path = "/v1/auth/refresh", tag = "auth", security(()), request_body = RefreshRequest,
    responses((status = 200, body = SessionTokens)))]
async fn session_refresh(
    State(app): State<App>,
    ApiJson(refresh): ApiJson<RefreshRequest>,
) -> ApiResult<Json<SessionTokens>> {
    Ok(Json(app.session_refresh(refresh).await?))
}

/// Log out: revoke the session of a refresh token.
#[utoipa::path(post, path = "/v1/auth/logout", tag = "auth", security(()), request_body = RefreshRequest,
    responses((status = 204, description = "Session revoked")))]
async fn session_logout(
    State(app): State<App>,
    ApiJson(refresh): ApiJson<RefreshRequest>,
) -> ApiResult<StatusCode> {
    app.session_logout(refresh).await?;
    Ok(StatusCode::NO_CONTENT)
}
