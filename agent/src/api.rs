//! The agent's HTTP API: routes, bearer-token authentication (constant-time comparison) and
//! errors as `application/problem+json` (`{type, title, status, code, detail}`, the same shape
//! as Bulkhead's own API).
//!
//! - `PUT /v1/workloads/{key}` `{"command": "...", "env": {...}, "port": 8080, "health_check":
//!   {"path": "/ready", "interval_ms": 2000, "timeout_ms": 1000, "healthy_threshold": 1,
//!   "unhealthy_threshold": 3}, "size": {"cpu_millis": 500, "memory_mib": 512}}` (the check
//!   optional; the size 500m/512 MiB when left out: see `limits`) → 201 (started) or 200 (it existed:
//!   returned unchanged); 409 `capacity_exhausted` when every slot (or every workload uid) is
//!   used. A workload with a check shows its `health` (`pending`, `healthy`, `unhealthy`).
//! - `GET /v1/workloads/{key}`, `GET /v1/workloads` (`{"items": [...]}`),
//!   `DELETE /v1/workloads/{key}` (204, also when already deleted),
//!   `GET /v1/workloads/{key}/logs` (`?after=&since_ms=&limit=&max_bytes=&wait_ms=`, answering
//!   `{"key", "lines": [{"seq", "time_ms", "stream", "text"}], "next", "gap"}`),
//!   `GET /v1/capacity`.
//! - `GET /healthz`, the only route without authentication.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::capacity::Capacity;
use crate::limits::WorkloadSize;
use crate::logs::{self, LogPage, LogQuery};
use crate::source::GitSource;
use crate::spec::{HealthCheck, NewWorkload, valid_key};
use crate::supervisor::{Put, Supervisor, SupervisorError, WorkloadView};

#[derive(Clone)]
struct AppState {
    supervisor: Arc<Supervisor>,
    token: Arc<str>,
}

/// The API's router over `supervisor`, accepting `token`.
pub(crate) fn router(supervisor: Arc<Supervisor>, token: &str) -> Router {
    let state = AppState {
        supervisor,
        token: token.into(),
    };
    let v1 = Router::new()
        .route(
            "/v1/workloads/{key}",
            get(get_workload).put(put_workload).delete(delete_workload),
        )
        .route("/v1/workloads/{key}/logs", get(workload_logs))
        .route("/v1/workloads", get(list_workloads))
        .route("/v1/capacity", get(capacity))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(v1)
        .fallback(|| async { Problem::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .with_state(state)
}

/// An error answer: `application/problem+json`.
#[derive(Debug)]
pub(crate) struct Problem {
    status: StatusCode,
    code: &'static str,
    detail: String,
}

#[derive(Serialize)]
struct ProblemBody<'a> {
    #[serde(rename = "type")]
    problem_type: &'a str,
    title: &'a str,
    status: u16,
    code: &'a str,
    detail: &'a str,
}

impl Problem {
    fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
        }
    }

    fn not_found(key: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no workload `{key}` on this agent"),
        )
    }

    fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!("internal error: {detail}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            detail.to_string(),
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = ProblemBody {
            problem_type: "about:blank",
            title: self.status.canonical_reason().unwrap_or("Error"),
            status: self.status.as_u16(),
            code: self.code,
            detail: &self.detail,
        };
        let mut response = (self.status, Json(body)).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<SupervisorError> for Problem {
    fn from(err: SupervisorError) -> Self {
        match err {
            SupervisorError::Full { slots } => Self::new(
                StatusCode::CONFLICT,
                "capacity_exhausted",
                format!("all {slots} workload slots of this agent are in use"),
            ),
            SupervisorError::NoRoom {
                size,
                free,
                offered,
            } => Self::new(
                StatusCode::CONFLICT,
                "capacity_exhausted",
                format!(
                    "the workload's size ({size}) does not fit: this agent has {free} free of \
                     the {offered} it offers"
                ),
            ),
            SupervisorError::UidsExhausted { uids } => Self::new(
                StatusCode::CONFLICT,
                "capacity_exhausted",
                format!("every workload uid of this agent ({uids}) is in use"),
            ),
            SupervisorError::Stopping => Self::new(
                StatusCode::CONFLICT,
                "workload_stopping",
                "the workload is being stopped; make it again once it is gone",
            ),
            SupervisorError::Invalid(detail) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_workload", detail)
            }
            SupervisorError::Internal(err) => Self::internal(format!("{err:#}")),
        }
    }
}

/// Lets through requests with `Authorization: Bearer <the agent's token>`.
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match presented {
        Some(token) if bool::from(token.as_bytes().ct_eq(state.token.as_bytes())) => {
            next.run(request).await
        }
        Some(_) => Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the bearer token is not this agent's",
        )
        .into_response(),
        None => Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "an `Authorization: Bearer <agent token>` header is required",
        )
        .into_response(),
    }
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutWorkload {
    command: String,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    health_check: Option<HealthCheck>,
    #[serde(default)]
    source: Option<GitSource>,
    #[serde(default)]
    size: Option<WorkloadSize>,
}

async fn put_workload(
    State(state): State<AppState>,
    Path(key): Path<String>,
    body: Result<Json<PutWorkload>, JsonRejection>,
) -> Result<(StatusCode, Json<WorkloadView>), Problem> {
    if !valid_key(&key) {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_key",
            "a workload key is 1 to 63 characters of `a-z`, `0-9` and `-`",
        ));
    }
    let Json(body) = body.map_err(|rejection| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            rejection.body_text(),
        )
    })?;
    let new = NewWorkload {
        command: body.command,
        env: body.env,
        port: body.port,
        health_check: body.health_check,
        source: body.source,
        size: body.size.unwrap_or(WorkloadSize::DEFAULT),
    };
    match state.supervisor.put(&key, new).await? {
        Put::Created(view) => Ok((StatusCode::CREATED, Json(view))),
        Put::Existing(view) => Ok((StatusCode::OK, Json(view))),
    }
}

async fn get_workload(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<WorkloadView>, Problem> {
    state
        .supervisor
        .get(&key)
        .map(Json)
        .ok_or_else(|| Problem::not_found(&key))
}

#[derive(Serialize)]
struct Items {
    items: Vec<WorkloadView>,
}

async fn list_workloads(State(state): State<AppState>) -> Json<Items> {
    Json(Items {
        items: state.supervisor.list(),
    })
}

async fn delete_workload(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<StatusCode, Problem> {
    state.supervisor.delete(&key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What `GET /v1/workloads/{key}/logs` reads.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogsParams {
    /// The lines after this number (a page's `next`).
    after: Option<u64>,
    /// Without `after`: the first lines at or after this time (ms since the Unix epoch).
    since_ms: Option<u64>,
    /// At most this many lines (1 to 1000; 1000 by default).
    limit: Option<usize>,
    /// At most this much text (1 MiB by default and at most).
    max_bytes: Option<usize>,
    /// When there is nothing after `after` yet, wait up to this many milliseconds for a line
    /// (at most 30000).
    wait_ms: Option<u64>,
}

/// The longest a logs request waits for a line.
const LOGS_WAIT_MAX: Duration = Duration::from_secs(30);

#[derive(Serialize)]
struct Logs {
    key: String,
    #[serde(flatten)]
    page: LogPage,
}

async fn workload_logs(
    State(state): State<AppState>,
    Path(key): Path<String>,
    params: Result<Query<LogsParams>, QueryRejection>,
) -> Result<Json<Logs>, Problem> {
    let Query(params) = params.map_err(|rejection| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            rejection.body_text(),
        )
    })?;
    let limit = params.limit.unwrap_or(logs::MAX_LINES);
    if !(1..=logs::MAX_LINES).contains(&limit) {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("limit must be 1 to {}", logs::MAX_LINES),
        ));
    }
    let query = LogQuery {
        after: params.after,
        since_ms: params.since_ms,
        limit,
        max_bytes: params.max_bytes.unwrap_or(logs::MAX_BYTES),
    };
    let wait = Duration::from_millis(params.wait_ms.unwrap_or(0)).min(LOGS_WAIT_MAX);
    match state.supervisor.logs(&key, query, wait).await {
        None => Err(Problem::not_found(&key)),
        Some(Err(err)) => Err(Problem::internal(format!("reading the log: {err}"))),
        Some(Ok(page)) => Ok(Json(Logs { key, page })),
    }
}

async fn capacity(State(state): State<AppState>) -> Json<Capacity> {
    Json(state.supervisor.capacity())
}
