//! `/v1/routing-table`: the signed routing table edges route by (`routing:read`), the changes
//! since a revision, a stream of them, and the keys that sign it.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiPath, ApiQuery, RoutingReader};
use super::sse::{
    BearerCredential, LastEventId, StreamAccess, StreamBatch, StreamEvent, event_stream,
};
use crate::app::App;
use crate::app::routing::{Prepared, RoutingChanges};
use crate::authz::OpContext;
use crate::error::{AppError, AppResult, ErrorCode};
use bulkhead_routing::caddy::{CaddyOptions, config as caddy_config};
use bulkhead_routing::{PublishedKey, PublishedKeys};

/// The header naming the revision of the table in a response.
pub const REVISION_HEADER: &str = "bulkhead-routing-revision";
/// The table's `Cache-Control` and `Vary`, on its 200s and its 304s alike.
pub const TABLE_CACHE_HEADERS: [(header::HeaderName, HeaderValue); 2] = [
    (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    (header::VARY, HeaderValue::from_static("accept-encoding")),
];

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(routing_table_view))
        .routes(routes!(routing_table_caddy))
        .routes(routes!(routing_table_changes))
        .routes(routes!(routing_table_watch))
        .routes(routes!(routing_key_list, routing_key_create))
        .routes(routes!(routing_key_activate))
        .routes(routes!(routing_key_delete))
}

/// The table takes no query parameter (one is refused rather than ignored).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableParams {}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CaddyParams {
    /// The address Caddy serves the routes on: `host:port` or `:port` (default `:80`).
    #[param(
        max_length = 255,
        pattern = "^[A-Za-z0-9.\\[\\]:-]*:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$"
    )]
    pub listen: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ChangesParams {
    /// The revision the client has.
    #[param(minimum = 0)]
    pub since: i64,
    /// Revisions listed at most (1 to 1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u64>,
}

/// The routing table (`routing:read`): the signed snapshot `{format, key_id, signature,
/// table}`, the Ed25519 signature (base64) covering the exact bytes of `table` as they appear;
/// its strong `ETag` answers `If-None-Match` with 304; gzip when accepted.
#[utoipa::path(get, path = "/v1/routing-table", tag = "routing", params(
        ("If-None-Match" = Option<String>, Header, description = "304 when it matches the current ETag")),
    responses(
        (status = 200, description = "The signed snapshot", body = bulkhead_routing::SignedSnapshotDoc,
            headers(("ETag" = String), ("Bulkhead-Routing-Revision" = i64))),
        (status = 304, description = "Not modified: `If-None-Match` names the current snapshot",
            headers(("ETag" = String), ("Bulkhead-Routing-Revision" = i64))),
        (status = 503, description = "The routing table is being built (at start-up)", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    ))]
async fn routing_table_view(
    State(app): State<App>,
    _caller: RoutingReader,
    headers: HeaderMap,
    ApiQuery(TableParams {}): ApiQuery<TableParams>,
) -> AppResult<Response> {
    let prepared = app.routing_snapshot().await?;
    Ok(snapshot_response(&prepared, accepts_gzip(&headers)))
}

/// The routing table as a Caddy configuration that serves it (`routing:read`), for a Caddy
/// that is not run by the edge agent: `caddy run --config` it, or `POST` it to Caddy's `/load`.
#[utoipa::path(get, path = "/v1/routing-table/caddy", tag = "routing", params(CaddyParams),
    responses(
        (status = 200, description = "The Caddy configuration of the current table", body = super::answer_schemas::CaddyConfig,
            headers(("Bulkhead-Routing-Revision" = i64))),
        (status = 503, description = "The routing table is being built (at start-up)", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    ))]
async fn routing_table_caddy(
    State(app): State<App>,
    _caller: RoutingReader,
    ApiQuery(params): ApiQuery<CaddyParams>,
) -> AppResult<Response> {
    let current = app.routing_current()?;
    let listen = listen_validate(params.listen.as_deref().unwrap_or(":80"))?;
    let options = CaddyOptions {
        listen: vec![listen],
        admin: None,
        tls: None,
    };
    let mut response = Json(caddy_config(&current.table(), &options)).into_response();
    revision_header(&mut response, current.revision);
    Ok(response)
}

fn snapshot_response(prepared: &Prepared, gzip: bool) -> Response {
    let zipped = prepared.gzip.get().filter(|_| gzip);
    let gzip = zipped.is_some();
    let body = zipped.unwrap_or(&prepared.identity).clone();
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        TABLE_CACHE_HEADERS,
        body,
    )
        .into_response();
    let headers = response.headers_mut();
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if let Ok(etag) = HeaderValue::from_str(&prepared.etag) {
        headers.insert(header::ETAG, etag);
    }
    revision_header(&mut response, prepared.revision);
    response
}

fn revision_header(response: &mut Response, revision: i64) {
    response
        .headers_mut()
        .insert(REVISION_HEADER, HeaderValue::from(revision));
}

/// Whether `Accept-Encoding` accepts gzip (named, or `*`, without `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim();
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    == Some(0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

fn listen_validate(listen: &str) -> AppResult<String> {
    let (host, port) = listen.rsplit_once(':').unwrap_or(("", ""));
    let host_ok = host.is_empty()
        || host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-[]:".contains(c));
    if host_ok && port.parse::<u16>().is_ok_and(|p| p > 0) && listen.len() <= 255 {
        Ok(listen.to_owned())
    } else {
        Err(AppError::new(
            ErrorCode::InvalidQuery,
            "`listen` must be `host:port` or `:port`",
        ))
    }
}

/// The changes after revision `since`, oldest first (`routing:read`); 410
/// `routing_history_gone` when they are no longer kept: fetch the whole table then.
#[utoipa::path(get, path = "/v1/routing-table/changes", tag = "routing", params(ChangesParams),
    responses(
        (status = 200, body = RoutingChanges),
        (status = 410, description = "The history no longer reaches back to `since`: fetch the whole table", body = crate::http::problem::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The routing table is being built (at start-up)", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    ))]
async fn routing_table_changes(
    State(app): State<App>,
    _caller: RoutingReader,
    ApiQuery(params): ApiQuery<ChangesParams>,
) -> AppResult<Json<RoutingChanges>> {
    let limit = params.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) || params.since < 0 {
        return Err(AppError::new(
            ErrorCode::InvalidQuery,
            "`since` must be 0 or more and `limit` 1 to 1000",
        ));
    }
    Ok(Json(app.routing_changes(params.since, limit).await?))
}

/// A stream of Server-Sent Events (`routing:read`): the current table (`event: snapshot`, the
/// signed snapshot document), `event: end-of-snapshot`, then each new revision's changes
/// (`event: change`, `id` = the revision), with heartbeat comments. Resuming with
/// `Last-Event-ID` sends only the changes after it, or the whole table again when they are no
/// longer kept. The stream ends within a second once the caller's credential no longer gives
/// access (revoked, expired, its user no longer an administrator).
#[utoipa::path(get, path = "/v1/routing-table/watch", tag = "routing",
    params(("Last-Event-ID" = Option<i64>, Header, minimum = 0, description = "Resume after this revision")),
    responses(
        (status = 200, description = "Events", content((super::answer_schemas::RoutingStreamEvent = "text/event-stream"))),
        (status = 503, description = "The routing table is being built (at start-up)", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    ))]
async fn routing_table_watch(
    State(app): State<App>,
    _caller: RoutingReader,
    bearer: BearerCredential,
    last_event_id: LastEventId,
) -> AppResult<Response> {
    app.routing_prepared()?;
    let wake = app.routing.subscribe();
    let stopping = app.stopping.clone();
    let access = StreamAccess::new(
        &app,
        bearer,
        Box::new(|principal| Box::pin(async move { principal.require_routing_read() })),
    );
    Ok(event_stream(
        last_event_id.0,
        wake,
        stopping,
        access,
        move |cursor| {
            let app = app.clone();
            async move {
                let prepared = app.routing_prepared()?;
                let changes = match cursor {
                    Some(cursor) => app.routing_changes_json(cursor).await?,
                    None => None,
                };
                let events = match changes {
                    Some(changes) => changes
                        .into_iter()
                        .map(|(revision, data)| StreamEvent {
                            id: revision,
                            kind: "change".into(),
                            data: data.to_string(),
                        })
                        .collect(),
                    None => snapshot_events(&prepared),
                };
                Ok(StreamBatch {
                    events,
                    finished: false,
                })
            }
        },
    ))
}

fn snapshot_events(prepared: &Prepared) -> Vec<StreamEvent> {
    vec![
        StreamEvent {
            id: prepared.revision,
            kind: "snapshot".into(),
            data: String::from_utf8_lossy(&prepared.identity).into_owned(),
        },
        StreamEvent {
            id: prepared.revision,
            kind: "end-of-snapshot".into(),
            data: serde_json::json!({ "revision": prepared.revision }).to_string(),
        },
    ]
}

/// The public keys of the routing table (`routing:read`): the one signing (`active`), any
/// published ahead of use (`next`) and those that signed earlier snapshots (`retired`). An edge
/// trusts a snapshot signed by a key of this document.
#[utoipa::path(get, path = "/v1/routing-table/keys", tag = "routing",
    responses((status = 200, body = PublishedKeys)))]
async fn routing_key_list(
    State(app): State<App>,
    RoutingReader(principal): RoutingReader,
) -> AppResult<Json<PublishedKeys>> {
    Ok(Json(app.routing_key_list(&principal).await?))
}

/// Publish a new key that does not sign yet (`next`; administrators): give it to edges, then
/// activate it.
#[utoipa::path(post, path = "/v1/routing-table/keys", tag = "routing",
    responses((status = 201, body = PublishedKey)))]
async fn routing_key_create(State(app): State<App>, ctx: OpContext) -> AppResult<Response> {
    let key = app.routing_key_create(&ctx).await?;
    Ok((StatusCode::CREATED, Json(key)).into_response())
}

/// Make a key sign new snapshots; the key that did is retired, still published
/// (administrators).
#[utoipa::path(post, path = "/v1/routing-table/keys/{key_id}/activate", tag = "routing",
    params(("key_id" = String, Path, description = "Key id")),
    responses((status = 200, body = PublishedKey)))]
async fn routing_key_activate(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(key_id): ApiPath<String>,
) -> AppResult<Json<PublishedKey>> {
    Ok(Json(app.routing_key_activate(&ctx, &key_id).await?))
}

/// Withdraw a key that does not sign (administrators): edges stop trusting what it signed.
#[utoipa::path(delete, path = "/v1/routing-table/keys/{key_id}", tag = "routing",
    params(("key_id" = String, Path, description = "Key id")),
    responses((status = 204, description = "Withdrawn")))]
async fn routing_key_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(key_id): ApiPath<String>,
) -> AppResult<StatusCode> {
    app.routing_key_delete(&ctx, &key_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
