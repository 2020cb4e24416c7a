//! `bulkhead-edge`: the edge agent alone, for edge machines (the same agent as `bulkhead edge`,
//! without the control plane's code).

use clap::Parser;

/// Keeps a Caddy routing by the signed routing table, from the last-known-good copy on disk
/// when no control plane answers.
#[derive(Parser)]
#[command(
    name = "bulkhead-edge",
    version,
    after_help = "Example:\n  bulkhead-edge --id edge-1 --control-plane https://cp.example.com --token-file edge.token --trusted-keys trusted-keys.json --acme-email ops@example.com"
)]
struct Cli {
    #[command(flatten)]
    args: bulkhead_edge::EdgeArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    bulkhead_edge::run(Cli::parse().args).await
}
