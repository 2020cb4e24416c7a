//! The edges' hot read, answered before the general middleware: `GET /v1/routing-table` with
//! an `If-None-Match` that names the current snapshot, from a caller this server already knows
//! (its credential in the auth cache), answers 304 here. Edges poll it every few seconds, and
//! almost every poll finds the table unchanged: the request-id, tracing, CORS, compression,
//! timeout and body-limit layers would cost more than the answer.
//!
//! It keeps what matters: the credential is checked (cached, unexpired, `routing:read`,
//! dropped with the cache whenever access narrows), the table answered is the one announced
//! (not an older signed one while a newer awaits its signature), and the response carries its
//! `ETag`, revision, cache headers and a request id, as the general way's 304 does. Anything
//! else — another path or method, a query, no or another tag, a credential not in the cache or
//! failing — goes the general way, which gives the same answers it always gave, errors
//! included.

use std::sync::{Arc, LazyLock};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::middleware::{REQUEST_ID, if_none_match_names};
use super::routing::{REVISION_HEADER, TABLE_CACHE_HEADERS};
use crate::app::App;

const TABLE_PATH: &str = "/v1/routing-table";

/// 304s answered here (registered once: this path counts its cost in nanoseconds).
static NOT_MODIFIED: LazyLock<metrics::Counter> =
    LazyLock::new(|| metrics::counter!("bulkhead_routing_not_modified_total"));

/// Answers an edge's poll of an unchanged table with 304, or passes the request on. (Its
/// state is an `Arc` of the application: one count to clone per request, not one per field.)
pub async fn routing_table_not_modified(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    match not_modified(&app, &request) {
        Some(response) => response,
        None => next.run(request).await,
    }
}

fn not_modified(app: &App, request: &Request) -> Option<Response> {
    if request.method() != Method::GET
        || request.uri().path() != TABLE_PATH
        || request.uri().query().is_some()
    {
        return None;
    }
    let headers = request.headers();
    let if_none_match = headers.get(header::IF_NONE_MATCH)?.to_str().ok()?;
    let prepared = app.routing_prepared_announced()?;
    if !if_none_match_names(if_none_match, &prepared.etag) {
        return None;
    }
    let bearer = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .trim();
    let principal = app.principal_cached(bearer)?;
    principal.require_routing_read().ok()?;
    let mut response = StatusCode::NOT_MODIFIED.into_response();
    let out = response.headers_mut();
    out.insert(header::ETAG, HeaderValue::from_str(&prepared.etag).ok()?);
    out.insert(REVISION_HEADER, HeaderValue::from(prepared.revision));
    out.extend(TABLE_CACHE_HEADERS);
    out.insert(
        REQUEST_ID,
        HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()).ok()?,
    );
    NOT_MODIFIED.increment(1);
    app.routing
        .not_modified_lean
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(response)
}
