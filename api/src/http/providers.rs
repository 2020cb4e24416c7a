//! `/v1/providers`: providers, their plugin versions, settings and health probes. Reading
//! needs the `read` scope; every change is for administrators.

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::pagination::{Page, PageParams};
use crate::app::providers::{
    ProviderActivate, ProviderActivationView, ProviderCreate, ProviderProbeView, ProviderUpdate,
    ProviderView,
};
use crate::authz::{OpContext, Principal};
use crate::error::ApiResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(provider_list, provider_create))
        .routes(routes!(provider_view, provider_update))
        .routes(routes!(provider_activate))
        .routes(routes!(provider_rollback))
        .routes(routes!(provider_activation_list))
        .routes(routes!(provider_probe))
}

/// List providers with their active plugin and call statistics.
#[utoipa::path(get, path = "/v1/providers", tag = "providers", params(PageParams),
    responses((status = 200, body = Page<ProviderView>)))]
async fn provider_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> ApiResult<Json<Page<ProviderView>>> {
    Ok(Json(app.provider_list(&principal, params).await?))
}

/// Configure a provider (administrators). It runs nothing until a plugin is activated.
#[utoipa::path(post, path = "/v1/providers", tag = "providers", request_body = ProviderCreate,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries of this request safe")),
    responses((status = 201, body = ProviderView, headers(("Location" = String), ("ETag" = String)))))]
async fn provider_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(create): ApiJson<ProviderCreate>,
) -> ApiResult<Response> {
    let (revision, view) = app.provider_create(&ctx, create).await?;
    Ok(created(
        format!("/v1/providers/{}", view.name),
        revision,
        view,
    ))
}

/// Get a provider.
#[utoipa::path(get, path = "/v1/providers/{name}", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = ProviderView, headers(("ETag" = String)))))]
async fn provider_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Response> {
    let (revision, view) = app.provider_view(&principal, &name).await?;
    Ok(tagged(revision, view))
}

/// Change a provider's configuration, secrets (write-only), allowlist, limits or enabled
/// state (administrators). The running plugin uses them from its next call.
#[utoipa::path(patch, path = "/v1/providers/{name}", tag = "providers", request_body = ProviderUpdate,
    params(("name" = String, Path, description = "Provider name"),
        ("If-Match" = Option<String>, Header, description = "ETag the change is based on")),
    responses((status = 200, body = ProviderView, headers(("ETag" = String)))))]
async fn provider_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<ProviderUpdate>,
) -> ApiResult<Response> {
    let (revision, view) = app
        .provider_update(&ctx, &name, if_match.as_deref(), update)
        .await?;
    Ok(tagged(revision, view))
}

/// Switch a provider to a stored plugin binary (administrators). The new version's `health`
/// is called first; a failing or `unavailable` answer refuses the switch (409
/// `plugin_unhealthy`). Calls in flight finish on the old version; new calls use the new one.
#[utoipa::path(post, path = "/v1/providers/{name}/activate", tag = "providers", request_body = ProviderActivate,
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = ProviderView, headers(("ETag" = String)))))]
async fn provider_activate(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
    ApiJson(activate): ApiJson<ProviderActivate>,
) -> ApiResult<Response> {
    let (revision, view) = app.provider_activate(&ctx, &name, activate).await?;
    Ok(tagged(revision, view))
}

/// Switch a provider back to the version active before its last switch (administrators).
#[utoipa::path(post, path = "/v1/providers/{name}/rollback", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = ProviderView, headers(("ETag" = String)))))]
async fn provider_rollback(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Response> {
    let (revision, view) = app.provider_rollback(&ctx, &name).await?;
    Ok(tagged(revision, view))
}

/// The versions a provider was switched to, oldest first.
#[utoipa::path(get, path = "/v1/providers/{name}/activations", tag = "providers",
    params(("name" = String, Path, description = "Provider name"), PageParams),
    responses((status = 200, body = Page<ProviderActivationView>)))]
async fn provider_activation_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(name): ApiPath<String>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> ApiResult<Json<Page<ProviderActivationView>>> {
    Ok(Json(
        app.provider_activation_list(&principal, &name, params)
            .await?
            .map(ProviderActivationView::from),
    ))
}

/// Call the active plugin's `health` now (administrators).
#[utoipa::path(post, path = "/v1/providers/{name}/probe", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = ProviderProbeView)))]
async fn provider_probe(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<ProviderProbeView>> {
    Ok(Json(app.provider_probe(&ctx.principal, &name).await?))
}
