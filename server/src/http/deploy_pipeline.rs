//! `/v1/deploy-pipeline` (administrators): the pipeline's controls and its reconciler's status;
//! `/v1/providers/{name}/evacuation` (administrators): moving everything off a provider.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiJson, ApiPath};
use crate::app::App;
use crate::app::deploys::evacuations::EvacuationView;
use crate::app::deploys::pipeline::{DeployPause, DeployPipelineUpdate, DeployPipelineView};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(deploy_pipeline_view, deploy_pipeline_update))
        .routes(routes!(deploy_pipeline_pause))
        .routes(routes!(deploy_pipeline_resume))
        .routes(routes!(
            evacuation_view,
            evacuation_start,
            evacuation_cancel
        ))
}

/// The deploy pipeline's controls, and the status of the reconciler of the server that
/// answers: queue depth, operations in flight by provider, recent errors (administrators).
#[utoipa::path(get, path = "/v1/deploy-pipeline", tag = "deployments",
    responses((status = 200, body = DeployPipelineView)))]
async fn deploy_pipeline_view(
    State(app): State<App>,
    principal: Principal,
) -> AppResult<Json<DeployPipelineView>> {
    Ok(Json(app.deploy_pipeline_view(&principal).await?))
}

/// Set the drain rate: provider operations started a second at most, across providers (0: no
/// limit). A backlog drains at this pace (administrators).
#[utoipa::path(patch, path = "/v1/deploy-pipeline", tag = "deployments", request_body = DeployPipelineUpdate,
    responses((status = 200, body = DeployPipelineView)))]
async fn deploy_pipeline_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(update): ApiJson<DeployPipelineUpdate>,
) -> AppResult<Json<DeployPipelineView>> {
    Ok(Json(app.deploy_pipeline_update(&ctx, update).await?))
}

/// Pause every deploy: operations in flight finish, nothing new starts at any provider;
/// deployments still queue (administrators).
#[utoipa::path(post, path = "/v1/deploy-pipeline/pause", tag = "deployments", request_body = DeployPause,
    responses((status = 200, body = DeployPipelineView)))]
async fn deploy_pipeline_pause(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(pause): ApiJson<DeployPause>,
) -> AppResult<Json<DeployPipelineView>> {
    Ok(Json(app.deploy_pipeline_pause(&ctx, pause).await?))
}

/// Resume deploys: the backlog drains at the drain rate (administrators).
#[utoipa::path(post, path = "/v1/deploy-pipeline/resume", tag = "deployments",
    responses((status = 200, body = DeployPipelineView)))]
async fn deploy_pipeline_resume(
    State(app): State<App>,
    ctx: OpContext,
) -> AppResult<Json<DeployPipelineView>> {
    Ok(Json(app.deploy_pipeline_resume(&ctx).await?))
}

/// The latest evacuation of a provider and how far it got (administrators).
#[utoipa::path(get, path = "/v1/providers/{name}/evacuation", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = EvacuationView)))]
async fn evacuation_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath(name): ApiPath<String>,
) -> AppResult<Json<EvacuationView>> {
    Ok(Json(app.evacuation_view(&principal, &name).await?.into()))
}

/// Evacuate a provider: every instance running there is re-placed elsewhere,
/// make-before-break, then removed where the provider can still be reached (those it could not
/// are listed). The provider takes no new instances meanwhile (administrators).
#[utoipa::path(post, path = "/v1/providers/{name}/evacuation", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 201, body = EvacuationView)))]
async fn evacuation_start(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
) -> AppResult<Response> {
    let started = app.evacuation_start(&ctx, &name).await?;
    Ok((StatusCode::CREATED, Json(EvacuationView::from(started))).into_response())
}

/// Cancel a running evacuation: replacements not yet serving are removed; instances not moved
/// stay (administrators).
#[utoipa::path(delete, path = "/v1/providers/{name}/evacuation", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, body = EvacuationView)))]
async fn evacuation_cancel(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(name): ApiPath<String>,
) -> AppResult<Json<EvacuationView>> {
    Ok(Json(app.evacuation_cancel(&ctx, &name).await?.into()))
}
