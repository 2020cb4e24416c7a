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
        let mut sent = report_send(edge, base, token, &body).await;
        if let Ok((StatusCode::UNPROCESSABLE_ENTITY, problem)) = &sent
            && problem.contains("certificates")
        {
            // A control plane from before certificate reports refuses the field (edges may be
            // upgraded first): the revision is reported without them.
            let mut older = body.clone();
            if let Some(fields) = older.as_object_mut() {
                fields.remove("certificates");
            }
            tracing::debug!(source = %base, "the control plane takes no certificates; reporting without them");
            sent = report_send(edge, base, token, &older).await;
        }
        match sent {
            Ok((status, _)) if status.is_success() => return,
            Ok((status, _)) => {
                tracing::warn!(source = %base, %status, "the control plane refused this edge's report")
            }
            Err(err) => tracing::debug!(source = %base, error = %err, "could not report"),
        }
    }
}

/// Posts a report: the status and the start of the answer's body.
async fn report_send(
    edge: &Edge,
    base: &str,
    token: &str,
    body: &serde_json::Value,
) -> reqwest::Result<(StatusCode, String)> {
    let response = edge
        .http
        .post(format!("{base}/v1/edges/{}/status", edge.settings.id))
        .bearer_auth(token)
        .json(body)
        .timeout(Duration::from_secs(5))
        .send()
        .await?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    Ok((status, text.chars().take(1000).collect()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A control plane from before certificate reports: it refuses the field as the server's
    /// strict JSON did (422, `unknown field`), and records what it takes.
    async fn older_control_plane() -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
        let taken = Arc::new(Mutex::new(Vec::new()));
        let kept = taken.clone();
        let router = axum::Router::new().route(
            "/v1/edges/{id}/status",
            axum::routing::post(move |Json(body): Json<serde_json::Value>| {
                let kept = kept.clone();
                async move {
                    if body.get("certificates").is_some() {
                        return (
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "unknown field `certificates`, expected one of `revision`",
                        );
                    }
                    kept.lock().unwrap().push(body);
                    (StatusCode::OK, "{}")
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        (base, taken)
    }

    #[tokio::test]
    async fn an_older_control_plane_gets_the_revision_without_certificates() {
        bulkhead_common::tls::crypto_provider_install();
        let (base, taken) = older_control_plane().await;
        let dir = tempfile::tempdir().unwrap();
        let tls = crate::certificates::EdgeTls::resolve(
            ":443".into(),
            crate::certificates::LETS_ENCRYPT,
            None,
            vec![],
            dir.path().join("certificates"),
        )
        .unwrap();
        let table = RoutingTable {
            revision: 7,
            generated_at: chrono::Utc::now(),
            drop_intended: false,
            routes: vec![],
        };
        let edge = Edge {
            settings: crate::EdgeSettings {
                id: "edge-1".into(),
                sources: vec![Source::ControlPlane(base)],
                token: Some("token".into()),
                trusted_keys: dir.path().join("keys.json"),
                ca_file: None,
                state_dir: dir.path().to_owned(),
                caddy_admin: "http://127.0.0.1:1".into(),
                caddy_listen: ":80".into(),
                tls: Some(tls),
                listen: "127.0.0.1:0".parse().unwrap(),
                max_drop: 0.5,
                poll_interval: Duration::from_secs(1),
                stale_after: Duration::from_secs(300),
            },
            state: Mutex::new(crate::EdgeState {
                applied: Some(crate::Applied {
                    table,
                    document: Arc::new(Vec::new()),
                }),
                ..Default::default()
            }),
            trusted: Mutex::default(),
            accepted: watch::channel(0).0,
            http: bulkhead_common::tls::http_client_builder(None)
                .unwrap()
                .build()
                .unwrap(),
            status_addr: "127.0.0.1:9".parse().unwrap(),
        };
        report(&edge).await;
        let taken = taken.lock().unwrap();
        assert_eq!(taken.len(), 1, "{taken:?}");
        assert_eq!(taken[0]["revision"], 7);
        assert!(taken[0].get("certificates").is_none());
    }
}
