//! Keeping Caddy serving the accepted table through its admin API: each accepted table is
//! loaded (`POST /load`, with HTTPS unless the edge serves plain HTTP), and once a second the
//! agent asks Caddy whether the table's revision is still loaded (`GET /id/bulkhead-r<revision>`);
//! after a restart it is not, and the agent loads it again. A Caddy that is down is retried;
//! nothing else waits for it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Edge;
use super::certificates::EdgeTls;
use bulkhead_routing::caddy::{CaddyOptions, CaddyTls, config, revision_id};

/// How often Caddy is asked whether it still serves the table.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Keeps Caddy in step with the accepted table until `stop` turns true.
pub async fn keep(edge: Arc<Edge>, mut stop: watch::Receiver<bool>) {
    let mut news = edge.accepted.subscribe();
    loop {
        let (applied, given) = {
            let state = edge.state();
            (state.applied.clone(), state.caddy_revision)
        };
        if let Some(applied) = applied {
            let revision = applied.table.revision;
            let loaded = given == Some(revision) && still_loaded(&edge, revision).await;
            if !loaded {
                if given == Some(revision) {
                    tracing::warn!(
                        revision,
                        "Caddy lost the routing table (restarted?): applying it again"
                    );
                }
                match load(&edge, &applied.table).await {
                    Ok(()) => {
                        edge.state().caddy_revision = Some(revision);
                        metrics::counter!("bulkhead_edge_caddy_loads_total").increment(1);
                        metrics::gauge!("bulkhead_edge_caddy_revision").set(revision as f64);
                        tracing::info!(
                            revision,
                            routes = applied.table.routes.len(),
                            "Caddy serves the routing table"
                        );
                    }
                    Err(err) => {
                        edge.state().caddy_revision = None;
                        metrics::counter!("bulkhead_edge_caddy_load_failures_total").increment(1);
                        tracing::warn!(revision, error = %err, "Caddy did not take the routing table; retrying");
                    }
                }
            }
        }
        tokio::select! {
            _ = news.changed() => {}
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
    }
}

async fn still_loaded(edge: &Edge, revision: i64) -> bool {
    let url = format!("{}/id/{}", edge.settings.caddy_admin, revision_id(revision));
    matches!(
        edge.http.get(url).timeout(Duration::from_secs(2)).send().await,
        Ok(response) if response.status().is_success()
    )
}

async fn load(edge: &Edge, table: &bulkhead_routing::RoutingTable) -> anyhow::Result<()> {
    let options = CaddyOptions {
        listen: vec![edge.settings.caddy_listen.clone()],
        admin: Some(admin_listen(&edge.settings.caddy_admin)),
        tls: edge
            .settings
            .tls
            .as_ref()
            .map(|tls| caddy_tls(edge, tls))
            .transpose()?,
    };
    let response = edge
        .http
        .post(format!("{}/load", edge.settings.caddy_admin))
        .json(&config(table, &options))
        .timeout(Duration::from_secs(10))
        .send()
        .await?;
    let status = response.status();
    anyhow::ensure!(
        status.is_success(),
        "Caddy answered {status}: {}",
        response.text().await.unwrap_or_default()
    );
    Ok(())
}

/// HTTPS as Caddy is told it: certificates asked for at this agent's permission endpoint.
fn caddy_tls(edge: &Edge, tls: &EdgeTls) -> anyhow::Result<CaddyTls> {
    let path = |path: &std::path::Path| path.to_string_lossy().into_owned();
    let mut ask = edge.status_addr;
    if ask.ip().is_unspecified() {
        ask.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    Ok(CaddyTls {
        listen: vec![tls.listen.clone()],
        acme_ca: tls.acme_ca.clone(),
        acme_email: tls.acme_email.clone(),
        acme_ca_roots: tls.acme_ca_roots.iter().map(|root| path(root)).collect(),
        ask: format!("http://{ask}/tls/ask"),
        storage: path(&tls.storage),
        events_log: Some(path(&EdgeTls::events_log(&edge.settings.state_dir)?)),
    })
}

/// The `host:port` of the admin API URL, kept in each configuration loaded (one without an
/// `admin` section would move Caddy's admin API back to its default address).
fn admin_listen(admin_url: &str) -> String {
    admin_url
        .split_once("://")
        .map_or(admin_url, |(_, rest)| rest)
        .trim_end_matches('/')
        .to_owned()
}
