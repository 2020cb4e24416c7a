//! `/v1/projects/{project_id}/services/{service_id}/deployments` (deployments, their events as
//! a list or a stream, cancel, rollback) and `/v1/projects/{project_id}/services/{service_id}/instances`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Json, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiPath, ApiQuery};
use super::sse::{
    BearerCredential, LastEventId, StreamAccess, StreamBatch, StreamEvent, event_stream,
    wants_event_stream,
};
use super::{created, tagged};
use crate::app::App;
use crate::app::deploys::deployments::{DeploymentCreate, DeploymentView};
use crate::app::deploys::events::{DeploymentEventView, EventPage, EventParams};
use crate::app::deploys::instances::DeployedInstanceView;
use crate::app::shared::pagination::{OrderedPageParams, Page, PageParams};
use crate::authz::{DeployScope, Principal, Scoped};
use crate::error::AppResult;
use crate::ids::{DeploymentId, ProjectId, ServiceId};

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(deployment_list, deployment_create))
        .routes(routes!(deployment_view))
        .routes(routes!(deployment_cancel))
        .routes(routes!(deployment_rollback))
        .routes(routes!(deployment_event_list))
        .routes(routes!(service_instance_list))
}

/// A service's deployments, oldest first (`order=desc`: newest first).
#[utoipa::path(get, path = "/v1/projects/{project_id}/services/{service_id}/deployments", tag = "deployments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"), OrderedPageParams),
    responses((status = 200, body = Page<DeploymentView>)))]
async fn deployment_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, service_id)): ApiPath<(ProjectId, ServiceId)>,
    ApiQuery(params): ApiQuery<OrderedPageParams>,
) -> AppResult<Page<DeploymentView>> {
    let page = app
        .deployment_list(&principal, project_id, service_id, params)
        .await?;
    Ok(Page {
        items: page
            .items
            .into_iter()
            .map(|m| DeploymentView::new(m, None))
            .collect::<AppResult<_>>()?,
        next_cursor: page.next_cursor,
    })
}

/// Deploy the service's current spec (members and above; a `deploy` token may) at a commit:
/// `commit`, or the latest pushed to a branch the service is bound to. It is queued, placed
/// and rolled out make-before-break by the reconciler; follow it with its events. A
/// deployment still rolling out is superseded by this one. An image that names the commit
/// (`{commit}`) with no commit to fill in answers 409 `no_commit`.
#[utoipa::path(post, path = "/v1/projects/{project_id}/services/{service_id}/deployments", tag = "deployments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"), DeploymentCreate),
    responses((status = 201, body = DeploymentView, headers(("Location" = String), ("ETag" = String)))))]
async fn deployment_create(
    State(app): State<App>,
    Scoped(ctx, _): Scoped<DeployScope>,
    ApiPath((project_id, service_id)): ApiPath<(ProjectId, ServiceId)>,
    ApiQuery(request): ApiQuery<DeploymentCreate>,
) -> AppResult<Response> {
    let made = app
        .deployment_create(&ctx, project_id, service_id, request)
        .await?;
    deployment_created(project_id, service_id, made)
}

fn deployment_created(
    project_id: ProjectId,
    service_id: ServiceId,
    made: crate::entity::deployment::Model,
) -> AppResult<Response> {
    let location = format!(
        "/v1/projects/{project_id}/services/{service_id}/deployments/{}",
        made.id
    );
    let revision = made.revision;
    Ok(created(
        location,
        revision,
        DeploymentView::new(made, Some(Vec::new()))?,
    ))
}

/// A deployment with its instances.
#[utoipa::path(get, path = "/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}", tag = "deployments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"),
        ("deployment_id" = Uuid, Path, description = "Deployment id")),
    responses((status = 200, body = DeploymentView, headers(("ETag" = String, description = "A weak tag of this answer: send it as `If-None-Match` to get 304 while the deployment is unchanged")))))]
async fn deployment_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, service_id, id)): ApiPath<(ProjectId, ServiceId, DeploymentId)>,
) -> AppResult<Response> {
    let deployment = app
        .deployment_view(&principal, project_id, service_id, id)
        .await?;
    Ok(super::digest_tagged(&deployment))
}

/// Cancel a deployment that has not finished: it stops, and the instances it made are
/// removed (the last healthy deployment keeps serving). Cancelling again answers the same;
/// a deployment that finished otherwise answers 409.
#[utoipa::path(post, path = "/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}/cancel", tag = "deployments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"),
        ("deployment_id" = Uuid, Path, description = "Deployment id")),
    responses((status = 200, body = DeploymentView, headers(("ETag" = String)))))]
async fn deployment_cancel(
    State(app): State<App>,
    Scoped(ctx, _): Scoped<DeployScope>,
    ApiPath((project_id, service_id, id)): ApiPath<(ProjectId, ServiceId, DeploymentId)>,
) -> AppResult<Response> {
    let cancelled = app
        .deployment_cancel(&ctx, project_id, service_id, id)
        .await?;
    let revision = cancelled.revision;
    Ok(tagged(revision, DeploymentView::new(cancelled, None)?))
}

/// Roll back: deploy again the spec of the last deployment before this one that became
/// healthy (409 if none did).
#[utoipa::path(post, path = "/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}/rollback", tag = "deployments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"),
        ("deployment_id" = Uuid, Path, description = "The deployment to roll back from")),
    responses((status = 201, body = DeploymentView, headers(("Location" = String), ("ETag" = String)))))]
async fn deployment_rollback(
    State(app): State<App>,
    Scoped(ctx, _): Scoped<DeployScope>,
    ApiPath((project_id, service_id, id)): ApiPath<(ProjectId, ServiceId, DeploymentId)>,
) -> AppResult<Response> {
    let made = app
        .deployment_rollback(&ctx, project_id, service_id, id)
        .await?;
    deployment_created(project_id, service_id, made)
}

/// A deployment's events: a page as JSON, or, with `Accept: text/event-stream`, a stream of
/// Server-Sent Events (`id` = `seq`, `event` = `kind`, `data` = the event as JSON) that sends
/// what already happened (after `Last-Event-ID`, if given), then new events as they happen,
/// with heartbeat comments, and ends once the deployment has finished and its removals are
/// done — or, within a second, once the caller's credential no longer gives access (revoked,
/// logged out, expired, its user disabled or removed from the project): reconnect with a valid
/// one and `Last-Event-ID`.
#[utoipa::path(get, path = "/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}/events", tag = "deployments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"),
        ("deployment_id" = Uuid, Path, description = "Deployment id"), EventParams,
        ("Last-Event-ID" = Option<i64>, Header, minimum = 0, description = "Streams: resume after this event")),
    responses((status = 200, description = "Events", content(
        (EventPage = "application/json"),
        (super::answer_schemas::DeploymentStreamEvent = "text/event-stream"),
    ))))]
async fn deployment_event_list(
    State(app): State<App>,
    principal: Principal,
    bearer: BearerCredential,
    headers: HeaderMap,
    last_event_id: LastEventId,
    ApiPath((project_id, service_id, id)): ApiPath<(ProjectId, ServiceId, DeploymentId)>,
    ApiQuery(params): ApiQuery<EventParams>,
) -> AppResult<Response> {
    let limit = params.limit()?;
    // Authorizes the caller (and finds the deployment) before anything is read or streamed.
    app.deployment_visible(&principal, project_id, service_id, id)
        .await?;
    if !wants_event_stream(&headers) {
        let items: Vec<DeploymentEventView> = app
            .deployment_events(id, params.after, limit)
            .await?
            .into_iter()
            .map(DeploymentEventView::from)
            .collect();
        let next_after = (items.len() as u64 == limit)
            .then(|| items.last().map(|e| e.seq))
            .flatten();
        return Ok(Json(EventPage { items, next_after }).into_response());
    }
    let cursor = last_event_id.0.or(params.after);
    let wake = app.deployment_watch.follow(id);
    let stopping = app.stopping.clone();
    let access = StreamAccess::project_reader(&app, bearer, project_id);
    Ok(event_stream(cursor, wake, stopping, access, move |after| {
        let app = app.clone();
        async move {
            app.deployment_watch.read_recorded();
            // Whether it finished is read before its events: an event written between the two
            // reads (the last one, say) is then still sent before the stream ends.
            let finished = app.deployment_stream_finished(id).await?;
            let events = app.deployment_events(id, after, 100).await?;
            let finished = finished && events.is_empty();
            let events = events
                .into_iter()
                .map(|event| {
                    let view = DeploymentEventView::from(event);
                    StreamEvent {
                        id: view.seq,
                        kind: view.kind.clone(),
                        data: serde_json::to_string(&view).unwrap_or_default(),
                    }
                })
                .collect();
            Ok(StreamBatch { events, finished })
        }
    }))
}

/// The service's instances that exist, or may, at their providers (not yet removed).
#[utoipa::path(get, path = "/v1/projects/{project_id}/services/{service_id}/instances", tag = "deployments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"), PageParams),
    responses((status = 200, body = Page<DeployedInstanceView>)))]
async fn service_instance_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, service_id)): ApiPath<(ProjectId, ServiceId)>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<DeployedInstanceView>> {
    app.service_instance_list(&principal, project_id, service_id, params)
        .await
}
