//! `/v1/providers`: providers, their plugin versions, settings and health probes. Anyone with
//! the `read` scope sees each provider's name, state and health; its details, history and
//! every change are for administrators.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::providers::health::ProviderEventView;
use crate::app::providers::instances::{InstanceCreate, InstanceView};
use crate::app::providers::versions::{
    ProviderActivate, ProviderActivationView, ProviderProbeView,
};
use crate::app::providers::{ProviderCreate, ProviderUpdate, ProviderView};
use crate::app::shared::pagination::{OrderedPageParams, Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(provider_list, provider_create))
        .routes(routes!(provider_view, provider_update))
        .routes(routes!(provider_activate))
        .routes(routes!(provider_rollback))
        .routes(routes!(provider_activation_list))
        .routes(routes!(provider_probe))
        .routes(routes!(provider_event_list))
        .routes(routes!(provider_instance_list, provider_instance_create))
        .routes(routes!(provider_instance_view, provider_instance_delete))
}

/// List providers.
///
/// Everyone sees each provider's name, state and health; administrators also see its
/// settings, active plugin, health reason and call statistics.
#[utoipa::path(get, path = "/v1/providers", tag = "providers", params(PageParams),
    responses((status = 200, body = Page<ProviderView>)))]
async fn provider_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<ProviderView>> {
    app.provider_list(&principal, params).await
}

/// Configure a provider (administrators). It runs nothing until a plugin is activated.
#[utoipa::path(post, path = "/v1/providers", tag = "providers", request_body = ProviderCreate,
    responses((status = 201, body = ProviderView, headers(("Location" = String), ("ETag" = String)))))]
async fn provider_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(create): ApiJson<ProviderCreate>,
) -> AppResult<Response> {
    let (revision, view) = app.provider_create(&ctx, create).await?;
    Ok(created(
        format!("/v1/providers/{}", view.name),
        revision,
        view,
    ))
}

/// Get a provider.
///
/// Everyone sees its name, state and health; administrators also see its settings, active
/// plugin, health reason and call statistics.
#[utoipa::path(get, path = "/v1/providers/{name}", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = ProviderView, headers(("ETag" = String)))))]
async fn provider_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath(name): ApiPath<String>,
) -> AppResult<Response> {
    let (revision, view) = app.provider_view(&principal, &name).await?;
    Ok(tagged(revision, view))
}

/// Change a provider's configuration, secrets (write-only), allowlist, limits or enabled
/// state (administrators). The running plugin uses them from its next call.
#[utoipa::path(patch, path = "/v1/providers/{name}", tag = "providers", request_body = ProviderUpdate,
    params(("name" = String, Path, description = "Provider name"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = ProviderView, headers(("ETag" = String)))))]
async fn provider_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<ProviderUpdate>,
) -> AppResult<Response> {
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
) -> AppResult<Response> {
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
) -> AppResult<Response> {
    let (revision, view) = app.provider_rollback(&ctx, &name).await?;
    Ok(tagged(revision, view))
}

/// The versions a provider was switched to, oldest first (`order=desc`: newest first;
/// administrators).
#[utoipa::path(get, path = "/v1/providers/{name}/activations", tag = "providers",
    params(("name" = String, Path, description = "Provider name"), OrderedPageParams),
    responses((status = 200, body = Page<ProviderActivationView>)))]
async fn provider_activation_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(name): ApiPath<String>,
    ApiQuery(params): ApiQuery<OrderedPageParams>,
) -> AppResult<Page<ProviderActivationView>> {
    Ok(app
        .provider_activation_list(&principal, &name, params)
        .await?
        .map(ProviderActivationView::from))
}

/// Call the active plugin's `health` now (administrators).
#[utoipa::path(post, path = "/v1/providers/{name}/probe", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = ProviderProbeView)))]
async fn provider_probe(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
) -> AppResult<Json<ProviderProbeView>> {
    Ok(Json(app.provider_probe(&ctx.principal, &name).await?))
}

/// A provider's events, oldest first (`order=desc`: newest first; administrators).
///
/// Changes of its health (`kind` `health`) and activations refused by the new version's
/// health check (`activation_refused`).
#[utoipa::path(get, path = "/v1/providers/{name}/events", tag = "providers",
    params(("name" = String, Path, description = "Provider name"), OrderedPageParams),
    responses((status = 200, body = Page<ProviderEventView>)))]
async fn provider_event_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(name): ApiPath<String>,
    ApiQuery(params): ApiQuery<OrderedPageParams>,
) -> AppResult<Page<ProviderEventView>> {
    Ok(app
        .provider_event_list(&principal, &name, params)
        .await?
        .map(ProviderEventView::from))
}

/// Every instance the provider has made for the control plane, as its plugin lists them
/// (administrators).
#[utoipa::path(get, path = "/v1/providers/{name}/instances", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = Page<InstanceView>),
        (status = 409, description = "The provider is disabled (`provider_disabled`) or has no plugin to ask (`provider_not_serving`)", body = crate::http::problem::Problem),
        (status = 502, description = "The provider refused or failed (unauthorized, account suspended, unexpected answer)", body = crate::http::problem::Problem),
        (status = 503, description = "The provider is unavailable or rate limiting (see Retry-After)", body = crate::http::problem::Problem),
        (status = 504, description = "The plugin did not answer in time", body = crate::http::problem::Problem)))]
async fn provider_instance_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(name): ApiPath<String>,
) -> AppResult<Page<InstanceView>> {
    app.provider_instance_list(&principal, &name).await
}

/// Provision an instance through the provider's plugin (administrators). Idempotent on
/// `instance_key`: provisioning a key again returns the instance made for it. Refused while
/// the provider is disabled, drained or unavailable.
#[utoipa::path(post, path = "/v1/providers/{name}/instances", tag = "providers", request_body = InstanceCreate,
    params(("name" = String, Path, description = "Provider name")),
    responses(
        (status = 201, body = InstanceView, headers(("Location" = String))),
        (status = 502, description = "The provider refused or failed (unauthorized, account suspended, unexpected answer)", body = crate::http::problem::Problem),
        (status = 503, description = "The provider is unavailable or rate limiting (see Retry-After)", body = crate::http::problem::Problem),
        (status = 504, description = "The plugin did not answer in time", body = crate::http::problem::Problem),
    ))]
async fn provider_instance_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
    ApiJson(create): ApiJson<InstanceCreate>,
) -> AppResult<Response> {
    let instance = app.provider_instance_create(&ctx, &name, create).await?;
    let location = format!("/v1/providers/{name}/instances/{}", instance.instance_key);
    Ok((
        StatusCode::CREATED,
        [(axum::http::header::LOCATION, location)],
        Json(instance),
    )
        .into_response())
}

/// Describe an instance through the provider's plugin (administrators).
#[utoipa::path(get, path = "/v1/providers/{name}/instances/{instance_key}", tag = "providers",
    params(("name" = String, Path, description = "Provider name"), ("instance_key" = String, Path, description = "Instance key", pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")),
    responses((status = 200, body = InstanceView),
        (status = 409, description = "The provider is disabled (`provider_disabled`) or has no plugin to ask (`provider_not_serving`)", body = crate::http::problem::Problem),
        (status = 502, description = "The provider refused or failed (unauthorized, account suspended, unexpected answer)", body = crate::http::problem::Problem),
        (status = 503, description = "The provider is unavailable or rate limiting (see Retry-After)", body = crate::http::problem::Problem),
        (status = 504, description = "The plugin did not answer in time", body = crate::http::problem::Problem)))]
async fn provider_instance_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath((name, key)): ApiPath<(String, String)>,
) -> AppResult<Json<InstanceView>> {
    Ok(Json(
        app.provider_instance_view(&principal, &name, &key).await?,
    ))
}

/// Deprovision an instance through the provider's plugin (administrators); deleting a
/// deleted instance succeeds.
#[utoipa::path(delete, path = "/v1/providers/{name}/instances/{instance_key}", tag = "providers",
    params(("name" = String, Path, description = "Provider name"), ("instance_key" = String, Path, description = "Instance key", pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")),
    responses((status = 204, description = "Deleted"),
        (status = 409, description = "The provider is disabled (`provider_disabled`) or has no plugin to ask (`provider_not_serving`)", body = crate::http::problem::Problem),
        (status = 502, description = "The provider refused or failed (unauthorized, account suspended, unexpected answer)", body = crate::http::problem::Problem),
        (status = 503, description = "The provider is unavailable or rate limiting (see Retry-After)", body = crate::http::problem::Problem),
        (status = 504, description = "The plugin did not answer in time", body = crate::http::problem::Problem)))]
async fn provider_instance_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((name, key)): ApiPath<(String, String)>,
) -> AppResult<StatusCode> {
    app.provider_instance_delete(&ctx, &name, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}
