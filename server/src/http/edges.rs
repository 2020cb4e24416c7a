//! `/v1/edges`: edge agents report the routing-table revision they serve; operators see the
//! fleet's convergence.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiJson, ApiPath, ApiQuery, RoutingReader};
use crate::app::App;
use crate::app::routing::edges::{EdgeStatusReport, EdgeView};
use crate::app::shared::pagination::{Page, PageParams};
use crate::authz::OpContext;
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(edge_list))
        .routes(routes!(edge_status_report))
        .routes(routes!(edge_delete))
}

/// Every edge that reported: its revision, lag, last contact and last refusal
/// (`routing:read`).
#[utoipa::path(get, path = "/v1/edges", tag = "routing", params(PageParams),
    responses((status = 200, body = Page<EdgeView>)))]
async fn edge_list(
    State(app): State<App>,
    RoutingReader(principal): RoutingReader,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<EdgeView>> {
    app.edge_list(&principal, params).await
}

/// Report the revision this edge serves (an API token with `routing:read`; the first token to
/// report as an edge id owns it: another gets 403 `edge_owned`).
#[utoipa::path(post, path = "/v1/edges/{edge_id}/status", tag = "routing",
    params(("edge_id" = String, Path, description = "The edge's id: 1 to 63 lowercase letters, digits or '-', starting with a letter and not ending with '-'", pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")),
    request_body = EdgeStatusReport,
    responses((status = 200, body = EdgeView),
        (status = 503, description = "The routing table is being built (at start-up)", body = crate::http::problem::Problem, content_type = "application/problem+json")))]
async fn edge_status_report(
    State(app): State<App>,
    RoutingReader(principal): RoutingReader,
    ApiPath(edge_id): ApiPath<String>,
    ApiJson(report): ApiJson<EdgeStatusReport>,
) -> AppResult<Json<EdgeView>> {
    Ok(Json(
        app.edge_status_report(&principal, &edge_id, report).await?,
    ))
}

/// Forget an edge (administrators).
#[utoipa::path(delete, path = "/v1/edges/{edge_id}", tag = "routing",
    params(("edge_id" = String, Path, description = "The edge's id", pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")),
    responses((status = 204, description = "Forgotten")))]
async fn edge_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(edge_id): ApiPath<String>,
) -> AppResult<StatusCode> {
    app.edge_delete(&ctx, &edge_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
