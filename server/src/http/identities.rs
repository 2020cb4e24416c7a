//! Sign-in through outside identity providers: `/v1/auth/providers` (public: how a caller
//! gets a session) and `/v1/me/identities` (the accounts a signed-in user linked).

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::client_ip;
use super::client_addr::ClientAddr;
use super::extract::{ApiJson, ApiPath};
use crate::app::App;
use crate::app::identity::sessions::SessionTokens;
use crate::app::identity::sign_in::outside::{
    IdentityView, SignInFinish, SignInProviderView, SignInStart,
};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;
use crate::http::problem::Problem;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(sign_in_provider_list))
        .routes(routes!(sign_in_start))
        .routes(routes!(sign_in_finish))
        .routes(routes!(identity_list))
        .routes(routes!(identity_link_start))
        .routes(routes!(identity_link_finish))
        .routes(routes!(identity_unlink))
}

/// The outside identity providers one may sign in with (as the operator configured them).
#[utoipa::path(get, path = "/v1/auth/providers", tag = "auth", security(()),
    responses((status = 200, body = Vec<SignInProviderView>)))]
async fn sign_in_provider_list(State(app): State<App>) -> Json<Vec<SignInProviderView>> {
    Json(app.sign_in_providers())
}

/// Start signing in with an outside provider: send the browser to `authorize_url`; the
/// provider sends it back to the configured redirect URI with `code` and `state`. Limited per
/// client address like password logins.
#[utoipa::path(post, path = "/v1/auth/providers/{provider}/start", tag = "auth", security(()),
    params(("provider" = String, Path, description = "The provider's name")),
    responses(
        (status = 200, body = SignInStart),
        (status = 429, description = "Too many sign-ins from this address (see Retry-After)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The provider is down or limiting us (`sign_in_unavailable`; see Retry-After): sign in with a password meanwhile", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
    ))]
async fn sign_in_start(
    State(app): State<App>,
    client: Option<Extension<ClientAddr>>,
    ApiPath(provider): ApiPath<String>,
) -> AppResult<Json<SignInStart>> {
    app.login.attempt_address(client_ip(client))?;
    Ok(Json(app.sign_in_start(&provider, None).await?))
}

/// Finish signing in with an outside provider: the code is exchanged (with the PKCE
/// verifier) and the linked user gets a session. The state works once, for ten minutes.
#[utoipa::path(post, path = "/v1/auth/providers/{provider}/finish", tag = "auth", security(()), request_body = SignInFinish,
    params(("provider" = String, Path, description = "The provider's name")),
    responses(
        (status = 200, body = SessionTokens, headers(("Cache-Control" = String, description = "`no-store`"))),
        (status = 400, description = "The state is unknown, expired or used; the provider refused the code; or its answer is refused: an ID token that does not verify (signature, issuer, audience, expiry, nonce), none, a userinfo `sub` not the ID token's, an `iss` not the issuer's (`sign_in_failed`, saying why)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "No user linked this account (`identity_not_linked`), or theirs is disabled", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The provider is down or limiting us, or another sign-in is finding out whether it answers again (`sign_in_unavailable`; see Retry-After). A sign-in refused before reaching the provider may send the same code and state again after the wait; one the provider refused answers 400 `sign_in_failed` then, and starts again", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
    ))]
async fn sign_in_finish(
    State(app): State<App>,
    client: Option<Extension<ClientAddr>>,
    ApiPath(provider): ApiPath<String>,
    ApiJson(finish): ApiJson<SignInFinish>,
) -> AppResult<Response> {
    let request_id = super::middleware::current_request_id().unwrap_or_default();
    let tokens = app
        .sign_in_finish(&provider, finish, client_ip(client), &request_id)
        .await?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(tokens)).into_response())
}

/// The outside accounts the caller linked.
#[utoipa::path(get, path = "/v1/me/identities", tag = "users",
    responses((status = 200, body = Vec<IdentityView>)))]
async fn identity_list(
    State(app): State<App>,
    principal: Principal,
) -> AppResult<Json<Vec<IdentityView>>> {
    Ok(Json(
        app.identity_list(&principal)
            .await?
            .into_iter()
            .map(IdentityView::from)
            .collect(),
    ))
}

/// Start linking an account at an outside provider to the caller (a session, not an API
/// token): as a sign-in, then finish at `…/finish`.
#[utoipa::path(post, path = "/v1/me/identities/{provider}/start", tag = "users",
    params(("provider" = String, Path, description = "The provider's name")),
    responses(
        (status = 200, body = SignInStart),
        (status = 503, description = "The provider is down or limiting us (`sign_in_unavailable`; see Retry-After)", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
    ))]
async fn identity_link_start(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(provider): ApiPath<String>,
) -> AppResult<Json<SignInStart>> {
    Ok(Json(
        app.identity_link_start(&ctx.principal, &provider).await?,
    ))
}

/// Finish linking: from now on the account signs the caller in.
#[utoipa::path(post, path = "/v1/me/identities/{provider}/finish", tag = "users", request_body = SignInFinish,
    params(("provider" = String, Path, description = "The provider's name")),
    responses(
        (status = 201, body = IdentityView),
        (status = 400, description = "The state is unknown, expired, used or not the caller's; the provider refused the code; or its answer is refused, as at sign-in (`sign_in_failed`, saying why)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The account is linked to a user already (`identity_taken`)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The provider is down or limiting us, or another sign-in is finding out whether it answers again (`sign_in_unavailable`; see Retry-After). A sign-in refused before reaching the provider may send the same code and state again after the wait; one the provider refused answers 400 `sign_in_failed` then, and starts again", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
    ))]
async fn identity_link_finish(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(provider): ApiPath<String>,
    ApiJson(finish): ApiJson<SignInFinish>,
) -> AppResult<Response> {
    let linked = app
        .identity_link_finish(&ctx.principal, &provider, finish)
        .await?;
    Ok((StatusCode::CREATED, Json(IdentityView::from(linked))).into_response())
}

/// Unlink one of the caller's outside accounts (a session, not an API token).
#[utoipa::path(delete, path = "/v1/me/identities/{identity_id}", tag = "users",
    params(("identity_id" = Uuid, Path, description = "Identity id")),
    responses((status = 204, description = "Unlinked")))]
async fn identity_unlink(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(id): ApiPath<Uuid>,
) -> AppResult<StatusCode> {
    app.identity_unlink(&ctx.principal, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
