//! `bulkhead-cli`: the client commands of `bulkhead` alone, for the machines of the people and
//! scripts that drive a server (no server code in it).

use std::process::ExitCode;

use clap::Parser;

/// Bulkhead's command-line client: log in, deploy, and operate a Bulkhead control plane.
#[derive(Parser)]
#[command(name = "bulkhead-cli", version, after_help = bulkhead_cli::help_footer())]
struct Cli {
    #[command(subcommand)]
    command: bulkhead_cli::ClientCommand,
}

#[tokio::main]
async fn main() -> ExitCode {
    bulkhead_cli::exit::process_exit(bulkhead_cli::run(Cli::parse().command).await)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every command and subcommand's `--help` ends with an example.
    #[test]
    fn every_command_has_an_example() {
        let missing = bulkhead_cli::commands_without_example(&Cli::command(), "bulkhead-cli");
        assert!(missing.is_empty(), "no example in --help: {missing:?}");
    }
}
