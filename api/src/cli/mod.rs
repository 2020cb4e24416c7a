//! The `bulkhead` command's groups of subcommands, one module each: `server` (serve, migrate,
//! secrets, openapi), `local` (dev, hello), `agent`, `edge`, `plugin` (plugin authors' tools),
//! and what the long-running ones share, `process`. The top-level list of commands and their
//! dispatch are in `main.rs`.

pub mod agent;
pub mod edge;
pub mod local;
pub mod plugin;
pub mod process;
pub mod server;
