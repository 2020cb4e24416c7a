//! What an edge tells: `/healthz` (200 once Caddy serves a table), `/metrics` (Prometheus),
//! `/tls/ask` (Caddy's question before it obtains a certificate, [`super::certificates`]),
//! warnings when no source has confirmed the table for a while, and reports of its revision
//! and certificates to the control plane (`POST /v1/edges/{id}/status`, after each change and every
//! [`REPORT_EVERY`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;
use tokio::sync::watch;

use super::Edge;
use super::sync::Source;
use bulkhead_routing::RoutingTable;

/// Time between reports to the control plane when nothing changes.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The gauges of a newly applied table.
pub fn applied_metrics(table: &RoutingTable) {
    metrics::gauge!("bulkhead_edge_revision").set(table.revision as f64);
    metrics::gauge!("bulkhead_edge_routes").set(table.routes.len() as f64);
    metrics::gauge!("bulkhead_edge_upstreams").set(table.upstream_count() as f64);
}

/// Updates the staleness gauge, and warns when no source confirmed the table for longer than
/// the configured time. Staleness never withdraws a route.
pub fn staleness_check(edge: &Edge) {
    let state = edge.state();
    let Some(staleness) = state.staleness() else {
        return;
    };
    metrics::gauge!("bulkhead_edge_staleness_seconds").set(staleness.as_secs_f64());
    let stale = staleness > edge.settings.stale_after;
    metrics::gauge!("bulkhead_edge_stale").set(if stale { 1.0 } else { 0.0 });
    if stale {
        tracing::warn!(
            revision = state.revision(),
            seconds = staleness.as_secs(),
            "no source has confirmed the routing table for a while; still serving it"
        );
    }
}

/// Reports to the first control plane that takes it, until `stop` turns true.
pub async fn report_run(edge: Arc<Edge>, mut stop: watch::Receiver<bool>) {
    let mut news = edge.accepted.subscribe();
    loop {
        report(&edge).await;
        tokio::select! {
            _ = news.changed() => {}
            _ = tokio::time::sleep(REPORT_EVERY) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

async fn report(edge: &Edge) {
    let Some(token) = &edge.settings.token else {
        return;
    };
    let body = {
        let state = edge.state();
        if state.applied.is_none() {
            return;
        }
        let mut body = json!({
            "revision": state.revision(),
            "snapshot_age_seconds": state.staleness().map(|s| s.as_secs_f64()),
            "last_refusal": state.last_refusal_json(),
            "agent_version": env!("CARGO_PKG_VERSION"),
        });
        if edge.settings.tls.is_some() {
            body["certificates"] = super::certificates::report(&state.certificates);
        }
        body
    };
    for source in &edge.settings.sources {
        let Source::ControlPlane(base) = source else {
            continue;
        };
        let sent = edge
            .http
            .post(format!("{base}/v1/edges/{}/status", edge.settings.id))
            .bearer_auth(token)
            .json(&body)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => return,
            Ok(response) => {
                tracing::warn!(source = %base, status = %response.status(), "the control plane refused this edge's report")
            }
            Err(err) => tracing::debug!(source = %base, error = %err, "could not report"),
        }
    }
}

/// Serves `/healthz` and `/metrics` until `stop` turns true.
pub async fn serve(
    edge: Arc<Edge>,
    listener: tokio::net::TcpListener,
    mut stop: watch::Receiver<bool>,
) {
    let metrics = bulkhead_common::metrics::prometheus_handle();
    let router = axum::Router::new()
        .route("/healthz", axum::routing::get(healthz))
        .route("/tls/ask", axum::routing::get(super::certificates::ask))
        .route(
            "/metrics",
            axum::routing::get(move |State(edge): State<Arc<Edge>>| async move {
                staleness_check(&edge);
                metrics.render()
            }),
        )
        .with_state(edge);
    let served = bulkhead_common::serve::serve(
        listener,
        router,
        None,
        bulkhead_common::serve::ConnectionLimits::for_this_process(),
        async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        },
    )
    .await;
    if let Err(err) = served {
        tracing::error!(error = %err, "the edge's status server stopped");
    }
}

/// 200 once Caddy serves a table (however old: staleness is not ill health), else 503.
async fn healthz(State(edge): State<Arc<Edge>>) -> impl IntoResponse {
    let state = edge.state();
    let body = json!({
        "revision": state.revision(),
        "caddy_revision": state.caddy_revision,
        "staleness_seconds": state.staleness().map(|s| s.as_secs_f64()),
        "watching": state.watching,
        "source": state.source,
        "last_refusal": state.last_refusal_json(),
    });
    let serving = state.applied.is_some() && state.caddy_revision == Some(state.revision());
    let status = if serving {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}
