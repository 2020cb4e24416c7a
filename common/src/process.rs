//! What the long-running commands (`serve`, `dev`, `agent`, `edge`) share as processes: logs to
//! stderr, and the signals that stop them. Nothing here knows what a command does.

use std::io::IsTerminal;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// The filter when `RUST_LOG` sets none (or one that does not parse).
const DEFAULT_FILTER: &str = "info,sqlx=warn,sea_orm=warn";

/// Logs to stderr, as JSON lines or as text, filtered by `RUST_LOG` (`LEVEL` and
/// `TARGET=LEVEL`, comma-separated; default: `info`, with the database layers at `warn`).
pub fn logging_init(json: bool) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|spec| spec.parse::<Targets>().ok())
        .unwrap_or_else(|| DEFAULT_FILTER.parse().expect("the default filter parses"));
    // Colours only for a person at a terminal: not in files, pipes or CI logs.
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        tracing_subscriber::registry()
            .with(layer.json().with_filter(filter))
            .init();
    } else {
        tracing_subscriber::registry()
            .with(layer.with_filter(filter))
            .init();
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, not when
/// the future is first polled, so a signal sent while the server starts is not lost.
#[cfg(unix)]
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {},
            _ = interrupt.recv() => {},
        }
    })
}

#[cfg(not(unix))]
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
