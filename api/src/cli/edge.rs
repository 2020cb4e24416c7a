//! `bulkhead edge`: runs the edge agent next to a Caddy, routing by the signed routing table
//! (from the last-known-good copy on disk when no control plane answers). Only start-up is
//! here; the agent is `bulkhead::edge`.

use bulkhead::config::LogFormat;
use bulkhead::edge::EdgeArgs;

use super::process::{logging_init, shutdown_signal};

pub async fn edge(args: EdgeArgs) -> anyhow::Result<()> {
    logging_init(LogFormat::Text);
    let settings = bulkhead::edge::EdgeSettings::resolve(args)?;
    let stop = shutdown_signal()?;
    let edge = bulkhead::edge::start(settings).await?;
    println!(
        "bulkhead edge: /metrics and /healthz on http://{}",
        edge.addr
    );
    stop.await;
    edge.shutdown().await;
    Ok(())
}
