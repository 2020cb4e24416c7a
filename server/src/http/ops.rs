//! Operations endpoints: `/healthz` (alive), `/readyz` (database reachable and migrations
//! current) and `/metrics` (Prometheus text format).

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::app::App;
use crate::error::{AppError, AppResult, ErrorCode};

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics_render))
}

/// The state of the server.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` or `ready`.
    pub status: String,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()), responses((status = 200, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the database answers and every migration is applied.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses((status = 200, body = Health), (status = 503, body = crate::http::problem::Problem, content_type = "application/problem+json")))]
async fn readyz(State(app): State<App>) -> AppResult<Json<Health>> {
    let unavailable = |detail: String| AppError::new(ErrorCode::NotReady, detail);
    crate::db::ping(&app.db).await.map_err(|err| {
        tracing::warn!(error = %err, "readiness: database unreachable");
        unavailable("the database is unreachable".into())
    })?;
    let pending = crate::db::pending_migrations(&app.db)
        .await
        .map_err(|_| unavailable("the migration state cannot be read".into()))?;
    if !pending.is_empty() {
        return Err(unavailable(format!(
            "migrations pending: {}",
            pending.join(", ")
        )));
    }
    Ok(Json(Health {
        status: "ready".into(),
    }))
}

/// Prometheus metrics: request counts and latency by route and status, database pool.
#[utoipa::path(get, path = "/metrics", tag = "operations", security(()),
    responses((status = 200, content_type = "text/plain", body = String)))]
async fn metrics_render(State(app): State<App>) -> Response {
    let (open, idle) = crate::db::pool_stats(&app.db);
    metrics::gauge!("db_pool_connections").set(open as f64);
    metrics::gauge!("db_pool_idle_connections").set(idle as f64);
    let body = bulkhead_common::metrics::prometheus_handle().render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}
