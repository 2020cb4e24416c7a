//! `/v1/auth`: password login, token refresh and logout. These endpoints are public: they are
//! how a caller gets a credential.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderName, StatusCode, header};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::client_addr::ClientAddr;
use super::extract::ApiJson;
use crate::app::App;
use crate::app::identity::sessions::{LoginRequest, RefreshRequest, SessionTokens};
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(session_login))
        .routes(routes!(session_refresh))
        .routes(routes!(session_logout))
}

/// Credentials in a response: never to be kept by a cache.
type NoStore<T> = ([(HeaderName, &'static str); 1], Json<T>);

fn no_store<T>(body: T) -> NoStore<T> {
    ([(header::CACHE_CONTROL, "no-store")], Json(body))
}

/// Log in with email and password: returns a short-lived access token and a refresh token.
/// Attempts are limited per client address and per account (429 with `Retry-After`).
#[utoipa::path(post, path = "/v1/auth/login", tag = "auth", security(()), request_body = LoginRequest,
    responses((status = 200, body = SessionTokens, headers(("Cache-Control" = String, description = "`no-store`"))),
        (status = 401, description = "Wrong email or password", body = crate::http::problem::Problem),
        (status = 429, description = "Too many attempts from this address or for this account (see Retry-After)", body = crate::http::problem::Problem),
        (status = 503, description = "Too many password checks running (see Retry-After)", body = crate::http::problem::Problem)))]
async fn session_login(
    State(app): State<App>,
    client: Option<Extension<ClientAddr>>,
    ApiJson(login): ApiJson<LoginRequest>,
) -> AppResult<NoStore<SessionTokens>> {
    let request_id = super::middleware::current_request_id().unwrap_or_default();
    Ok(no_store(
        app.session_login(login, client_ip(client), &request_id)
            .await?,
    ))
}

/// Exchange a refresh token for new tokens. Each refresh token works once; reusing one revokes
/// the whole session.
#[utoipa::path(post, path = "/v1/auth/refresh", tag = "auth", security(()), request_body = RefreshRequest,
    responses((status = 200, body = SessionTokens, headers(("Cache-Control" = String, description = "`no-store`"))),
        (status = 401, description = "The refresh token is invalid, expired, revoked or reused", body = crate::http::problem::Problem)))]
async fn session_refresh(
    State(app): State<App>,
    ApiJson(refresh): ApiJson<RefreshRequest>,
) -> AppResult<NoStore<SessionTokens>> {
    Ok(no_store(app.session_refresh(refresh).await?))
}

/// Log out: revoke the session of a refresh token.
#[utoipa::path(post, path = "/v1/auth/logout", tag = "auth", security(()), request_body = RefreshRequest,
    responses((status = 204, description = "Session revoked")))]
async fn session_logout(
    State(app): State<App>,
    ApiJson(refresh): ApiJson<RefreshRequest>,
) -> AppResult<StatusCode> {
    app.session_logout(refresh).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The client's address (the unspecified address where none is known: a router served without
/// connection info, as in unit tests).
pub(super) fn client_ip(client: Option<Extension<ClientAddr>>) -> std::net::IpAddr {
    client.map_or(
        std::net::Ipv4Addr::UNSPECIFIED.into(),
        |Extension(ClientAddr(ip))| ip,
    )
}
