//! `/v1/status` (administrators): the control plane's replicas and the leader of each kind of
//! background work.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::app::App;
use crate::app::status::ClusterStatus;
use crate::authz::Principal;
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(cluster_status))
}

/// The replicas sharing the database (id, address, version, heartbeat) and, for each kind of
/// background work, the replica leading it and its lease's term (administrators).
#[utoipa::path(get, path = "/v1/status", tag = "operations",
    responses((status = 200, body = ClusterStatus)))]
async fn cluster_status(
    State(app): State<App>,
    principal: Principal,
) -> AppResult<Json<ClusterStatus>> {
    Ok(Json(app.cluster_status(&principal).await?))
}
