//! Middleware applied to every route: request context (request id, problem details for every
//! error, metrics), authentication, idempotency keys and conditional GETs.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Instant;

use axum::body::{Body, HttpBody, to_bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::git::HOOK_MAX_BYTES;
use super::plugins::UPLOAD_PATH;
use crate::app::App;
use crate::app::git::installations::HOOK_PATH;
use crate::app::providers::plugin_binaries::PLUGIN_MAX_BYTES;
use crate::app::shared::idempotency::{Finished, IdempotencyStart, RESPONSE_LOST, StoredResponse};
use crate::authz::{Principal, authz_trail_keep};
use crate::error::{AppError, ErrorCode};
use crate::http::problem::{PROBLEM_JSON, problem, problem_response};

/// Limits request bodies to `limit` bytes, [`PLUGIN_MAX_BYTES`] for plugin uploads and
/// [`HOOK_MAX_BYTES`] for git deliveries. A declared length over the limit is refused before
/// anything is read; a body that runs past it stops there, and its extractor answers 413.
///
/// Any answer given before the body was read to its end (this 413, a 401 or 403 refused
/// before an upload is read, a 415) leaves the rest of it unread, so the connection cannot
/// carry another request: `Connection: close` says so, or a client reusing the connection
/// would write its next request into a closed socket.
pub async fn body_limit(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let limit = match (request.method(), request.uri().path()) {
        (&Method::POST, UPLOAD_PATH) => PLUGIN_MAX_BYTES,
        (&Method::POST, HOOK_PATH) => HOOK_MAX_BYTES,
        _ => limit,
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return connection_close(
            AppError::new(
                ErrorCode::BodyTooLarge,
                format!("the request body is larger than the limit of {limit} bytes"),
            )
            .into_response(),
        );
    }
    let read_to_end = Arc::new(AtomicBool::new(request.body().is_end_stream()));
    let watched = read_to_end.clone();
    let response = next
        .run(request.map(|body| {
            Body::new(ReadToEndWatch {
                inner: http_body_util::Limited::new(body, limit),
                read_to_end: watched,
            })
        }))
        .await;
    if read_to_end.load(Ordering::Acquire) {
        response
    } else {
        connection_close(response)
    }
}

fn connection_close(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that records whether it was read to its end.
struct ReadToEndWatch<B> {
    inner: B,
    read_to_end: Arc<AtomicBool>,
}

impl<B: HttpBody + Unpin> HttpBody for ReadToEndWatch<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.read_to_end.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

tokio::task_local! {
    static CURRENT_REQUEST_ID: String;
}

/// The id of the request being handled on this task, if any.
pub fn current_request_id() -> Option<String> {
    CURRENT_REQUEST_ID.try_with(Clone::clone).ok()
}

/// Drops a client-supplied `x-request-id` that is too long or has characters other than
/// letters, digits and `-_.:`, so that a new one is generated: request ids are logged and
/// stored in the audit log.
pub async fn request_id_sanitize(mut request: Request, next: Next) -> Response {
    let acceptable = |value: &HeaderValue| {
        value.len() <= 100
            && !value.is_empty()
            && value
                .as_bytes()
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b))
    };
    if request
        .headers()
        .get(REQUEST_ID)
        .is_some_and(|value| !acceptable(value))
    {
        request.headers_mut().remove(REQUEST_ID);
    }
    next.run(request).await
}

/// Runs the request with its id in scope, turns any error response that is not already a
/// problem (404/405 from routing, 408 from the timeout, 413 from the body limit, 500 from a
/// caught panic) into one, and records request metrics.
pub async fn request_context(request: Request, next: Next) -> Response {
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let method = request.method().to_string();
    let started = Instant::now();
    let response = CURRENT_REQUEST_ID
        .scope(request_id.clone(), next.run(request))
        .await;
    let response = CURRENT_REQUEST_ID.sync_scope(request_id, || problem_ensure(response));
    let status = response.status().as_u16().to_string();
    let labels = [("method", method), ("route", route), ("status", status)];
    metrics::counter!("http_requests_total", &labels).increment(1);
    metrics::histogram!("http_request_duration_seconds", &labels)
        .record(started.elapsed().as_secs_f64());
    response
}

fn problem_ensure(response: Response) -> Response {
    let status = response.status();
    let is_problem = response.headers().get(header::CONTENT_TYPE) == Some(&PROBLEM_JSON);
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return response;
    }
    let (code, detail) = match status {
        StatusCode::NOT_FOUND => (ErrorCode::NotFound, "no such endpoint"),
        StatusCode::METHOD_NOT_ALLOWED => (
            ErrorCode::MethodNotAllowed,
            "this endpoint does not support this method",
        ),
        StatusCode::REQUEST_TIMEOUT => (
            ErrorCode::Timeout,
            "the request took too long and was abandoned",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => (
            ErrorCode::BodyTooLarge,
            "the request body is larger than the limit",
        ),
        StatusCode::INTERNAL_SERVER_ERROR => {
            tracing::error!("request failed without an error value (panic?)");
            (
                ErrorCode::Internal,
                "internal error; quote the request id when reporting it",
            )
        }
        _ => (
            ErrorCode::Error,
            status.canonical_reason().unwrap_or("error"),
        ),
    };
    let mut problem = problem_response(status, code, detail);
    // Keep headers that matter to the client, such as `Allow` on 405.
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(value) = response.headers().get(&name) {
            problem.headers_mut().insert(name, value.clone());
        }
    }
    problem
}

/// Resolves `Authorization: Bearer` into a [`Principal`] for the handlers. A request without
/// the header goes on unauthenticated (public endpoints); a bad credential is 401 at once.
pub async fn authenticate(State(app): State<App>, mut request: Request, next: Next) -> Response {
    if let Some(value) = request.headers().get(header::AUTHORIZATION) {
        let bearer = value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|token| !token.is_empty() && token.len() <= 4096);
        let Some(bearer) = bearer else {
            return AppError::unauthenticated("Authorization must be `Bearer <token>`")
                .into_response();
        };
        match app.principal_from_bearer(bearer).await {
            Ok(principal) => {
                let bearer = super::sse::BearerCredential(bearer.into());
                request.extensions_mut().insert(principal);
                request.extensions_mut().insert(bearer);
            }
            Err(err) => return err.into_response(),
        }
    }
    next.run(request).await
}

/// Applies `Idempotency-Key` to authenticated POST requests.
pub async fn idempotency(State(app): State<App>, request: Request, next: Next) -> Response {
    let Some(key) = request.headers().get(IDEMPOTENCY_KEY).cloned() else {
        return next.run(request).await;
    };
    let Some(principal) = request.extensions().get::<Principal>().cloned() else {
        return next.run(request).await;
    };
    let credential = principal.credential_key();
    // Uploads are idempotent by content (a stored binary answers 200 with itself), and their
    // body must not be read before the handler has checked that the caller is an
    // administrator: buffering it here would let any token holder make the server hold 32 MiB.
    if request.method() != Method::POST || request.uri().path() == UPLOAD_PATH {
        return next.run(request).await;
    }
    let key = match key.to_str() {
        Ok(key) if (1..=255).contains(&key.len()) => key.to_owned(),
        _ => {
            return AppError::new(
                ErrorCode::InvalidHeader,
                "Idempotency-Key must be 1 to 255 visible ASCII characters",
            )
            .into_response();
        }
    };
    let (parts, body) = request.into_parts();
    // The body is already bounded by `body_limit`.
    let Ok(body) = to_bytes(body, usize::MAX).await else {
        return AppError::new(
            ErrorCode::BodyTooLarge,
            "the request body is larger than the limit",
        )
        .into_response();
    };
    let mut hasher = Sha256::new();
    hasher.update(parts.method.as_str());
    hasher.update(b" ");
    hasher.update(parts.uri.to_string());
    hasher.update(b"\n");
    hasher.update(&body);
    let request_hash = hex::encode(hasher.finalize());

    match app
        .idempotency_start(&credential, &key, &request_hash)
        .await
    {
        Err(err) => err.into_response(),
        Ok(IdempotencyStart::Replay(stored, checks)) => {
            match app.idempotency_replay_authorize(&principal, &checks).await {
                Ok(()) => stored_response_build(stored),
                Err(err) => err.into_response(),
            }
        }
        Ok(IdempotencyStart::Proceed) => {
            // The request's write transactions mark the claim as having taken effect.
            let claim = (credential.clone(), key.clone());
            let (response, checks) = crate::db::IDEMPOTENCY_CLAIM
                .scope(
                    claim,
                    authz_trail_keep(next.run(Request::from_parts(parts, Body::from(body)))),
                )
                .await;
            let (parts, body) = response.into_parts();
            let lost = || {
                let status = StatusCode::CONFLICT;
                let problem = problem(status, ErrorCode::IdempotencyResponseLost, RESPONSE_LOST);
                Finished::Failed {
                    lost: StoredResponse {
                        status: status.as_u16(),
                        headers: vec![(
                            header::CONTENT_TYPE.as_str().to_owned(),
                            PROBLEM_JSON.to_str().unwrap_or_default().to_owned(),
                        )],
                        body: serde_json::to_vec(&problem).unwrap_or_default(),
                    },
                }
            };
            let Ok(body) = to_bytes(body, usize::MAX).await else {
                app.idempotency_finish_eventually(&credential, &key, lost(), &[])
                    .await;
                return AppError::internal("response body could not be read").into_response();
            };
            let finished = if parts.status.is_server_error() {
                lost()
            } else {
                Finished::Answered(StoredResponse {
                    status: parts.status.as_u16(),
                    headers: replayable_headers(&parts.headers),
                    body: body.to_vec(),
                })
            };
            app.idempotency_finish_eventually(&credential, &key, finished, &checks)
                .await;
            Response::from_parts(parts, Body::from(body))
        }
    }
}

fn replayable_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    [
        header::CONTENT_TYPE,
        header::LOCATION,
        header::ETAG,
        header::CACHE_CONTROL,
    ]
    .iter()
    .filter_map(|name| {
        let value = headers.get(name)?.to_str().ok()?;
        Some((name.as_str().to_owned(), value.to_owned()))
    })
    .collect()
}

fn stored_response_build(stored: StoredResponse) -> Response {
    let mut response = Response::new(Body::from(stored.body));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().insert(name, value);
        }
    }
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// Headers of a 200 that its 304 keeps: those a cache updates its stored response with
/// (RFC 9110, 15.4.5), and the routing table's revision, which says what the tag stands for.
const KEPT_ON_NOT_MODIFIED: [HeaderName; 4] = [
    header::ETAG,
    header::CACHE_CONTROL,
    header::VARY,
    HeaderName::from_static(super::routing::REVISION_HEADER),
];

/// Whether an `If-None-Match` list names `etag` (the weak comparison: tags match whatever
/// their `W/` prefixes; `*` matches any).
pub fn if_none_match_names(if_none_match: &str, etag: &str) -> bool {
    fn opaque(tag: &str) -> &str {
        tag.trim().trim_start_matches("W/")
    }
    let current = opaque(etag);
    if_none_match
        .split(',')
        .any(|tag| tag.trim() == "*" || opaque(tag) == current)
}

/// Answers a GET whose `If-None-Match` matches the response's `ETag` with 304.
///
/// It never reads a response body: a resource's handler sets its strong `ETag`, a list's comes
/// from its page's `IntoResponse` ([`crate::app::shared::pagination::ViewPage`]'s from its
/// rows' revisions, [`crate::app::shared::pagination::Page`]'s from its serialized bytes),
/// and a response without one (such as an event stream) passes through untouched.
pub async fn conditional_get(request: Request, next: Next) -> Response {
    if request.method() != Method::GET {
        return next.run(request).await;
    }
    let if_none_match = request.headers().get(header::IF_NONE_MATCH).cloned();
    let response = next.run(request).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    let (Some(if_none_match), Some(etag)) = (if_none_match, response.headers().get(header::ETAG))
    else {
        return response;
    };
    let matches = match (if_none_match.to_str(), etag.to_str()) {
        (Ok(list), Ok(etag)) => if_none_match_names(list, etag),
        _ => false,
    };
    if !matches {
        return response;
    }
    let mut not_modified = StatusCode::NOT_MODIFIED.into_response();
    for name in KEPT_ON_NOT_MODIFIED {
        if let Some(value) = response.headers().get(&name) {
            not_modified.headers_mut().insert(name, value.clone());
        }
    }
    not_modified
}
