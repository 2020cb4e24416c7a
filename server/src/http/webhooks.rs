//! `/v1/projects/{project_id}/webhooks`: a project's outbound webhook endpoints, their
//! messages (the delivery log) and replays.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::shared::pagination::{OrderedPageParams, Page, PageParams};
use crate::app::webhooks::{
    WebhookEndpointCreate, WebhookEndpointCreated, WebhookEndpointUpdate, WebhookEndpointView,
    WebhookMessageView,
};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;
use crate::ids::ProjectId;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(webhook_endpoint_list, webhook_endpoint_create))
        .routes(routes!(
            webhook_endpoint_view,
            webhook_endpoint_update,
            webhook_endpoint_delete
        ))
        .routes(routes!(webhook_endpoint_secret_rotate))
        .routes(routes!(webhook_message_list))
        .routes(routes!(webhook_message_replay))
}

/// An answer holding a secret: never stored by a cache.
fn with_secret(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// List a project's webhook endpoints.
#[utoipa::path(get, path = "/v1/projects/{project_id}/webhooks", tag = "webhooks",
    params(("project_id" = Uuid, Path, description = "Project id"), PageParams),
    responses((status = 200, body = Page<WebhookEndpointView>)))]
async fn webhook_endpoint_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<WebhookEndpointView>> {
    app.webhook_endpoint_list(&principal, project_id, params)
        .await?
        .try_map(WebhookEndpointView::try_from)
}

/// Register a webhook endpoint (admins and owners). The answer holds its signing secret,
/// once.
#[utoipa::path(post, path = "/v1/projects/{project_id}/webhooks", tag = "webhooks", request_body = WebhookEndpointCreate,
    params(("project_id" = Uuid, Path, description = "Project id")),
    responses((status = 201, body = WebhookEndpointCreated, headers(("Location" = String), ("ETag" = String)))))]
async fn webhook_endpoint_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiJson(create): ApiJson<WebhookEndpointCreate>,
) -> AppResult<Response> {
    let (endpoint, secret) = app
        .webhook_endpoint_create(&ctx, project_id, create)
        .await?;
    Ok(with_secret(created(
        format!("/v1/projects/{project_id}/webhooks/{}", endpoint.id),
        endpoint.revision,
        WebhookEndpointCreated {
            endpoint: endpoint.try_into()?,
            secret,
        },
    )))
}

/// Get a webhook endpoint (never its secret).
#[utoipa::path(get, path = "/v1/projects/{project_id}/webhooks/{webhook_id}", tag = "webhooks",
    params(("project_id" = Uuid, Path, description = "Project id"), ("webhook_id" = Uuid, Path, description = "Endpoint id")),
    responses((status = 200, body = WebhookEndpointView, headers(("ETag" = String)))))]
async fn webhook_endpoint_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
) -> AppResult<Response> {
    let endpoint = app
        .webhook_endpoint_view(&principal, project_id, id)
        .await?;
    Ok(tagged(
        endpoint.revision,
        WebhookEndpointView::try_from(endpoint)?,
    ))
}

/// Change a webhook endpoint's URL or event types (admins and owners); a new URL closes its
/// breaker.
#[utoipa::path(patch, path = "/v1/projects/{project_id}/webhooks/{webhook_id}", tag = "webhooks", request_body = WebhookEndpointUpdate,
    params(("project_id" = Uuid, Path, description = "Project id"), ("webhook_id" = Uuid, Path, description = "Endpoint id"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = WebhookEndpointView, headers(("ETag" = String)))))]
async fn webhook_endpoint_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<WebhookEndpointUpdate>,
) -> AppResult<Response> {
    let endpoint = app
        .webhook_endpoint_update(&ctx, project_id, id, if_match.as_deref(), update)
        .await?;
    Ok(tagged(
        endpoint.revision,
        WebhookEndpointView::try_from(endpoint)?,
    ))
}

/// Delete a webhook endpoint and its messages (admins and owners).
#[utoipa::path(delete, path = "/v1/projects/{project_id}/webhooks/{webhook_id}", tag = "webhooks",
    params(("project_id" = Uuid, Path, description = "Project id"), ("webhook_id" = Uuid, Path, description = "Endpoint id"), ("If-Match" = Option<String>, Header)),
    responses((status = 204, description = "Deleted")))]
async fn webhook_endpoint_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
    if_match: IfMatch,
) -> AppResult<StatusCode> {
    app.webhook_endpoint_delete(&ctx, project_id, id, if_match.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Give a webhook endpoint a new signing secret (admins and owners), shown in this answer
/// only; for 24 hours messages carry a signature with the previous one too.
#[utoipa::path(post, path = "/v1/projects/{project_id}/webhooks/{webhook_id}/secret", tag = "webhooks",
    params(("project_id" = Uuid, Path, description = "Project id"), ("webhook_id" = Uuid, Path, description = "Endpoint id")),
    responses((status = 200, body = WebhookEndpointCreated, headers(("ETag" = String)))))]
async fn webhook_endpoint_secret_rotate(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
) -> AppResult<Response> {
    let (endpoint, secret) = app
        .webhook_endpoint_secret_rotate(&ctx, project_id, id)
        .await?;
    Ok(with_secret(tagged(
        endpoint.revision,
        WebhookEndpointCreated {
            endpoint: endpoint.try_into()?,
            secret,
        },
    )))
}

/// List the messages of a webhook endpoint and what became of each (the delivery log).
#[utoipa::path(get, path = "/v1/projects/{project_id}/webhooks/{webhook_id}/messages", tag = "webhooks",
    params(("project_id" = Uuid, Path, description = "Project id"), ("webhook_id" = Uuid, Path, description = "Endpoint id"), OrderedPageParams),
    responses((status = 200, body = Page<WebhookMessageView>)))]
async fn webhook_message_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
    ApiQuery(params): ApiQuery<OrderedPageParams>,
) -> AppResult<Page<WebhookMessageView>> {
    app.webhook_message_list(&principal, project_id, id, params)
        .await?
        .try_map(WebhookMessageView::try_from)
}

/// Send a message again now (admins and owners): the same `webhook-id`, a fresh timestamp
/// and signature, the retry schedule from its start.
#[utoipa::path(post, path = "/v1/projects/{project_id}/webhooks/{webhook_id}/messages/{message_id}/replay", tag = "webhooks",
    params(("project_id" = Uuid, Path, description = "Project id"), ("webhook_id" = Uuid, Path, description = "Endpoint id"), ("message_id" = Uuid, Path, description = "Message id")),
    responses((status = 200, body = WebhookMessageView)))]
async fn webhook_message_replay(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, endpoint, id)): ApiPath<(ProjectId, Uuid, Uuid)>,
) -> AppResult<Response> {
    let message = app
        .webhook_message_replay(&ctx, project_id, endpoint, id)
        .await?;
    Ok(Json(WebhookMessageView::try_from(message)?).into_response())
}
