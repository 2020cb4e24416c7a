//! Server-Sent Events, the one way Bulkhead streams: a stream replays what happened after the
//! client's `Last-Event-ID`, then follows new events as they are written, with heartbeats, and
//! ends when its source says there is nothing more to come. A client that drops reconnects
//! with the id of the last event it saw and misses nothing.
//!
//! A stream is authorized again while it lasts, not only when it opens: before every batch it
//! sends, and at once whenever access may have narrowed (the `auth` topic: a token revoked, a
//! logout, a user disabled or demoted, a membership removed — here or, through the change feed,
//! on another replica). A credential that no longer passes, or that expired, ends the stream
//! within a second ([`POLL_EVERY`]); the client's reconnection is then refused with 401 or
//! 403/404 like any request.
//!
//! To add a streaming route, give [`event_stream`] a `fetch` that reads the events after a
//! cursor (oldest first, at most a page), a [`watch`] receiver that is bumped whenever there
//! may be more to read — also for writes of other replicas: the stream reads only when it
//! moves (see `app::deploys::watch`) — and the route's [`StreamAccess`]. The request timeout does not cut a stream (it bounds only the
//! response head), and no middleware buffers a body, so nothing else is needed.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use tokio::sync::watch;

use crate::app::App;
use crate::authz::Principal;
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::ProjectId;

/// How often a stream checks its credential again without being told of a change (its
/// expiry); its source is read only when its `wake` moves.
pub const POLL_EVERY: Duration = Duration::from_secs(1);
/// How long a stream may stay silent before a heartbeat comment is sent.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(15);

/// One event of a stream: its id (the cursor a client resumes after: a number, or the text
/// of an opaque cursor), its type and its data.
#[derive(Debug, Clone)]
pub struct StreamEvent<C = i64> {
    pub id: C,
    pub kind: String,
    /// JSON text.
    pub data: String,
}

/// What a stream's source answered: the events after the cursor, and whether the stream ends
/// once they are sent.
pub struct StreamBatch<C = i64> {
    pub events: Vec<StreamEvent<C>>,
    pub finished: bool,
}

/// The `Last-Event-ID` header a reconnecting client sends (the id of the last event it got).
/// Streams that also take a cursor in the query (`after`) use it when this header is absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct LastEventId(pub Option<i64>);

impl<S: Send + Sync> FromRequestParts<S> for LastEventId {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.headers.get("last-event-id") {
            None => Ok(Self(None)),
            Some(value) => value
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<i64>().ok())
                .filter(|id| *id >= 0)
                .map(|id| Self(Some(id)))
                .ok_or_else(|| {
                    AppError::new(
                        ErrorCode::InvalidHeader,
                        "Last-Event-ID must be the id of an event of this stream",
                    )
                }),
        }
    }
}

/// The `Last-Event-ID` of a stream whose ids are opaque cursors: visible ASCII, at most
/// `LAST_EVENT_TEXT_MAX` bytes.
#[derive(Debug, Clone, Default)]
pub struct LastEventText(pub Option<String>);

/// The longest `Last-Event-ID` text taken.
const LAST_EVENT_TEXT_MAX: usize = 64 * 1024;

impl<S: Send + Sync> FromRequestParts<S> for LastEventText {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.headers.get("last-event-id") {
            None => Ok(Self(None)),
            Some(value) => value
                .to_str()
                .ok()
                .map(str::trim)
                .filter(|text| !text.is_empty() && text.len() <= LAST_EVENT_TEXT_MAX)
                .map(|text| Self(Some(text.to_owned())))
                .ok_or_else(|| {
                    AppError::new(
                        ErrorCode::InvalidHeader,
                        "Last-Event-ID must be the id of an event of this stream",
                    )
                }),
        }
    }
}

/// The bearer credential of a request, as the authentication middleware found it: what a
/// stream checks again while it lasts.
#[derive(Clone)]
pub struct BearerCredential(pub Arc<str>);

/// A check of the caller of a stream, run again while the stream lasts: the principal that the
/// stream's credential stands for now, authorized for the stream's resource.
pub type AccessCheck =
    Box<dyn FnMut(Principal) -> Pin<Box<dyn Future<Output = AppResult<()>> + Send>> + Send>;

/// Who may go on reading a stream (see the module documentation).
pub struct StreamAccess {
    app: App,
    bearer: Arc<str>,
    changes: watch::Receiver<u64>,
    check: AccessCheck,
}

impl StreamAccess {
    /// The access of the request's credential (`bearer`), checked again with `check`.
    pub fn new(app: &App, bearer: BearerCredential, check: AccessCheck) -> Self {
        Self {
            app: app.clone(),
            bearer: bearer.0,
            changes: app.changes.auth.subscribe(),
            check,
        }
    }

    /// The access of a reader of one project's streams (its deployments' events, its services'
    /// logs): a viewer with a `read` or `deploy` token, as
    /// [`App::project_stream_allowed`] says.
    pub fn project_reader(app: &App, bearer: BearerCredential, project_id: ProjectId) -> Self {
        let checked = app.clone();
        Self::new(
            app,
            bearer,
            Box::new(move |principal| {
                let app = checked.clone();
                Box::pin(async move { app.project_stream_allowed(&principal, project_id).await })
            }),
        )
    }

    /// Whether the credential still passes the stream's check.
    async fn allowed(&mut self) -> AppResult<()> {
        self.changes.borrow_and_update();
        let principal = self.app.principal_from_bearer(&self.bearer).await?;
        (self.check)(principal).await
    }
}

impl FromRequestParts<App> for BearerCredential {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &App) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<BearerCredential>()
            .cloned()
            .ok_or_else(|| AppError::unauthenticated("this needs `Authorization: Bearer <token>`"))
    }
}

/// Whether the client asked for an event stream (`Accept: text/event-stream`).
pub fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"))
}

/// An event stream starting after `cursor`, woken by `wake`, ended when the server stops
/// (`stopping` turns true) or when `access` no longer passes: see the module documentation.
pub fn event_stream<C, F, Fut>(
    cursor: Option<C>,
    wake: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    access: StreamAccess,
    fetch: F,
) -> Response
where
    C: Clone + std::fmt::Display + Send + 'static,
    F: FnMut(Option<C>) -> Fut + Send + 'static,
    Fut: Future<Output = AppResult<StreamBatch<C>>> + Send + 'static,
{
    Sse::new(events(cursor, wake, stopping, access, fetch))
        .keep_alive(KeepAlive::new().interval(HEARTBEAT_EVERY))
        .into_response()
}

struct Follow<C, F> {
    cursor: Option<C>,
    pending: VecDeque<StreamEvent<C>>,
    finished: bool,
    wake: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    access: StreamAccess,
    fetch: F,
}

fn events<C, F, Fut>(
    cursor: Option<C>,
    wake: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    access: StreamAccess,
    fetch: F,
) -> impl Stream<Item = Result<Event, Infallible>> + Send
where
    C: Clone + std::fmt::Display + Send + 'static,
    F: FnMut(Option<C>) -> Fut + Send + 'static,
    Fut: Future<Output = AppResult<StreamBatch<C>>> + Send + 'static,
{
    let state = Follow {
        cursor,
        pending: VecDeque::new(),
        finished: false,
        wake,
        stopping,
        access,
        fetch,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        // Read at once; later, only when woken.
        let mut woken = true;
        loop {
            if let Some(next) = state.pending.pop_front() {
                let event = Event::default()
                    .id(next.id.to_string())
                    .event(next.kind)
                    .data(next.data);
                state.cursor = Some(next.id);
                return Some((Ok(event), state));
            }
            if state.finished || *state.stopping.borrow() {
                return None;
            }
            if let Err(err) = state.access.allowed().await {
                metrics::counter!("event_streams_ended_by_access_total").increment(1);
                tracing::info!(
                    code = %err.code,
                    "event stream ended: its credential no longer gives access"
                );
                return None;
            }
            if woken {
                woken = false;
                // Mark what was seen before reading, so that a write during the read wakes us.
                state.wake.borrow_and_update();
                match (state.fetch)(state.cursor.clone()).await {
                    Ok(batch) => {
                        state.finished = batch.finished;
                        if !batch.events.is_empty() || batch.finished {
                            state.pending.extend(batch.events);
                            // More may follow a full page.
                            woken = true;
                            continue;
                        }
                    }
                    Err(err) => {
                        // The client reconnects with its Last-Event-ID and misses nothing.
                        tracing::warn!(error = %err, "event stream ended by a failed read");
                        return None;
                    }
                }
            }
            tokio::select! {
                changed = state.wake.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    woken = true;
                }
                // A graceful shutdown waits for open connections: streams end first.
                _ = state.stopping.changed() => {}
                // Access is checked again on each change that may narrow it, and every
                // `POLL_EVERY` (a credential's expiry).
                _ = state.access.changes.changed() => {}
                _ = tokio::time::sleep(POLL_EVERY) => {}
            }
        }
    })
}
