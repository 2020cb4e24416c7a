//! The `bulkhead` command: the list of its subcommands and where each goes. Each group lives in
//! a module of `bulkhead_commands` (this package's library) or in the crate it delegates to
//! (`bulkhead-cli`, `bulkhead-agent`, `bulkhead-edge`); this file only dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use bulkhead::config::ServeArgs;

/// jemalloc, on Linux (see `Cargo.toml` for why).
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options: a background thread returns freed pages to the system while the server
/// idles (otherwise only allocations do, so an idle server keeps a burst's pages).
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[unsafe(export_name = "malloc_conf")]
static MALLOC_CONF: &[u8; 23] = b"background_thread:true\0";

#[derive(Parser)]
#[command(
    name = "bulkhead",
    version,
    about = "Bulkhead control-plane API server, and its command-line client",
    after_help = bulkhead_cli::help_footer()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API server (migrations are applied at start-up).
    #[command(
        after_help = "Example:\n  BULKHEAD_BOOTSTRAP_TOKEN=my-first-admin-token-0001 bulkhead serve --listen 0.0.0.0:8443 --tls-cert /etc/bulkhead/tls.pem --tls-key /etc/bulkhead/tls.key"
    )]
    Serve(ServeArgs),
    /// Apply, roll back or list schema migrations.
    #[command(
        after_help = "Example:\n  bulkhead migrate --database-url postgres://bulkhead@db/bulkhead status"
    )]
    Migrate {
        #[command(flatten)]
        args: ServeArgs,
        #[command(subcommand)]
        action: bulkhead_commands::server::MigrateAction,
    },
    /// Print the OpenAPI document (the committed copies are `openapi/openapi.json` and, in
    /// the 3.0 form that some generators need, `openapi/openapi-3.0.json`).
    #[command(
        after_help = "Example:\n  bulkhead openapi --openapi-version 3.0 > openapi/openapi-3.0.json"
    )]
    Openapi {
        /// `3.1` (as the server serves it at `/openapi.json`) or `3.0`.
        #[arg(long = "openapi-version", default_value = "3.1", value_parser = ["3.1", "3.0"])]
        version: String,
    },
    /// Manage the master key that encrypts secrets at rest.
    #[command(
        after_help = "Example:\n  bulkhead secrets rotate-key --new-key-file /etc/bulkhead/secret.key.new"
    )]
    Secrets {
        #[command(flatten)]
        args: ServeArgs,
        #[command(subcommand)]
        action: bulkhead_commands::server::SecretsAction,
    },
    /// Run a complete local platform: the server with the bundled providers, a host agent and
    /// the GCP and AWS simulators, the providers configured to use them.
    #[cfg(feature = "dev")]
    #[command(
        after_help = "Example:\n  BULKHEAD_BOOTSTRAP_TOKEN=my-first-admin-token-0001 bulkhead dev"
    )]
    Dev(bulkhead_commands::local::DevArgs),
    /// A demo workload: answers every HTTP request on $PORT with its name.
    #[cfg(feature = "dev")]
    #[command(after_help = "Example:\n  PORT=9000 bulkhead hello --name web-1")]
    Hello(bulkhead_commands::local::HelloArgs),
    /// Run the host agent of a machine of the platform's own fleet: workloads of the `metal`
    /// provider run here as supervised processes.
    #[command(
        after_help = "Example:\n  bulkhead agent --listen 0.0.0.0:7070 --token-file /etc/bulkhead/agent-token --data-dir /var/lib/bulkhead-agent --tls-cert /etc/bulkhead/agent.pem --tls-key /etc/bulkhead/agent.key"
    )]
    Agent(bulkhead_agent::command::AgentArgs),
    /// Run the edge agent next to a Caddy: keeps it routing by the signed routing table,
    /// from the last-known-good copy on disk when no control plane answers.
    #[command(
        after_help = "Example:\n  bulkhead edge --id edge-1 --control-plane https://cp.example.com --token-file edge.token --trusted-keys trusted-keys.json --acme-email ops@example.com"
    )]
    Edge(bulkhead_edge::EdgeArgs),
    /// Play the account suspension that inspired Bulkhead against a local platform (a control
    /// plane process, the simulators, a host agent, an edge in front of real Caddy) and check
    /// that everything that must survive it does.
    #[cfg(feature = "dev")]
    Drill(bulkhead_commands::drill::DrillArgs),
    /// Tools for plugin authors.
    #[command(
        after_help = "Example:\n  bulkhead plugin new my-cloud && bulkhead plugin inspect my-cloud.wasm"
    )]
    Plugin {
        #[command(subcommand)]
        action: bulkhead_commands::plugin::PluginAction,
    },
    /// The client commands (login, projects, services, deploy, ...), also the lean
    /// `bulkhead-cli` binary.
    #[command(flatten)]
    Client(bulkhead_cli::ClientCommand),
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => bulkhead_commands::server::serve(args).await,
        Command::Migrate { args, action } => bulkhead_commands::server::migrate(args, action).await,
        Command::Openapi { version } => bulkhead_commands::server::openapi(&version),
        Command::Secrets { args, action } => bulkhead_commands::server::secrets(args, action).await,
        #[cfg(feature = "dev")]
        Command::Dev(args) => bulkhead_commands::local::dev(args).await,
        #[cfg(feature = "dev")]
        Command::Hello(args) => bulkhead_commands::local::hello(args).await,
        Command::Agent(args) => bulkhead_agent::command::run(args).await,
        Command::Edge(args) => bulkhead_edge::run(args).await,
        #[cfg(feature = "dev")]
        Command::Drill(args) => bulkhead_commands::drill::drill_command(args).await,
        Command::Plugin { action } => {
            bulkhead_common::process::logging_init(false);
            bulkhead_commands::plugin::plugin_command(action).await
        }
        Command::Client(command) => bulkhead_cli::run(command).await,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    bulkhead_common::tls::crypto_provider_install();
    bulkhead_cli::exit::process_exit(run(Cli::parse().command).await)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every command and subcommand's `--help` ends with an example.
    #[test]
    fn every_command_has_an_example() {
        let missing = bulkhead_cli::commands_without_example(&Cli::command(), "bulkhead");
        assert!(missing.is_empty(), "no example in --help: {missing:?}");
    }
}
