//! `/v1/projects/{project_id}/services/{service_id}/logs`: the lines a service's instances
//! printed, as a page or followed as Server-Sent Events.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Json, Response};
use tokio::sync::watch;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiPath, ApiQuery};
use super::sse::{
    BearerCredential, LastEventText, StreamAccess, StreamBatch, StreamEvent, event_stream,
    wants_event_stream,
};
use crate::app::App;
use crate::app::deploys::logs::{FOLLOW_EVERY, LogFollow, LogPageView, LogParams};
use crate::authz::Principal;
use crate::error::AppResult;
use crate::ids::{ProjectId, ServiceId};

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(service_logs))
}

/// A service's logs: the lines its instances printed (those that exist at their providers),
/// merged by time, oldest first: the newest lines, or from `since`, or after `cursor`. An
/// instance whose provider cannot be read now (suspended, unavailable, without logs) is left
/// out and named in `missing`; the others' lines still come.
///
/// With `Accept: text/event-stream`, the lines are followed: a `logs` event whenever there are
/// new lines (or the instances left out change), its `id` the cursor to resume after with
/// `Last-Event-ID`. A project has at most 20 followers at once on each server (409
/// `limit_reached` past that); a follower whose credential no longer gives access is ended
/// within a second.
#[utoipa::path(get, path = "/v1/projects/{project_id}/services/{service_id}/logs", tag = "deployments",
    params(("project_id" = Uuid, Path, description = "Project id"), ("service_id" = Uuid, Path, description = "Service id"),
        LogParams,
        ("Last-Event-ID" = Option<String>, Header, description = "Streams: resume after this event (a page's `next_cursor`)")),
    responses((status = 200, description = "Lines", content(
        (LogPageView = "application/json"),
        (super::answer_schemas::LogStreamEvent = "text/event-stream"),
    ))))]
async fn service_logs(
    State(app): State<App>,
    principal: Principal,
    bearer: BearerCredential,
    headers: HeaderMap,
    last_event: LastEventText,
    ApiPath((project_id, service_id)): ApiPath<(ProjectId, ServiceId)>,
    ApiQuery(params): ApiQuery<LogParams>,
) -> AppResult<Response> {
    let mut read = app
        .service_logs_authorize(&principal, project_id, service_id, params)
        .await?;
    if !wants_event_stream(&headers) {
        return Ok(Json(app.service_logs(&read).await?).into_response());
    }
    if let Some(cursor) = &last_event.0 {
        read.resume(cursor)?;
    }
    let permit = app.log_followers.admit(project_id)?;
    let follow = LogFollow::new(read, permit);
    // Providers are asked again every `FOLLOW_EVERY`: nothing tells of a new line.
    let (tick, wake) = watch::channel(0u64);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tick.closed() => return,
                () = tokio::time::sleep(FOLLOW_EVERY) => tick.send_modify(|n| *n += 1),
            }
        }
    });
    let access = StreamAccess::project_reader(&app, bearer, project_id);
    let stopping = app.stopping.clone();
    let follow = std::sync::Arc::new(tokio::sync::Mutex::new(follow));
    Ok(event_stream(
        last_event.0,
        wake,
        stopping,
        access,
        move |_after: Option<String>| {
            let (app, follow) = (app.clone(), follow.clone());
            async move {
                let mut follow = follow.lock().await;
                let events = follow
                    .next(&app)
                    .await?
                    .map(|page| StreamEvent {
                        id: page.next_cursor.clone(),
                        kind: "logs".to_owned(),
                        data: serde_json::to_string(&page).unwrap_or_default(),
                    })
                    .into_iter()
                    .collect();
                Ok(StreamBatch {
                    events,
                    finished: false,
                })
            }
        },
    ))
}
