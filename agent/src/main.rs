//! `bulkhead-agent`: the host agent alone, for the machines of the platform's own fleet (the
//! same agent as `bulkhead agent`, without the control plane's code).

use clap::Parser;

/// Runs the workloads of the `metal` provider on this machine as supervised processes.
#[derive(Parser)]
#[command(
    name = "bulkhead-agent",
    version,
    after_help = "Example:\n  bulkhead-agent --listen 0.0.0.0:7070 --token-file /etc/bulkhead/agent-token --data-dir /var/lib/bulkhead-agent --tls-cert /etc/bulkhead/agent.pem --tls-key /etc/bulkhead/agent.key"
)]
struct Cli {
    #[command(flatten)]
    args: bulkhead_agent::command::AgentArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    bulkhead_agent::command::run(Cli::parse().args).await
}
