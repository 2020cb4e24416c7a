//! The `bulkhead` command's own groups of subcommands, one module each: `server` (serve,
//! migrate, secrets, openapi), `local` (dev, hello) and `drill` (the outage drill) — both only
//! with the default `dev` feature —, and `plugin` (plugin authors' tools). The top-level list of
//! commands and their dispatch are in `main.rs`; the client commands are `bulkhead-cli`, the
//! host agent `bulkhead-agent` and the edge agent `bulkhead-edge`.

#[cfg(feature = "dev")]
pub mod drill;
#[cfg(feature = "dev")]
pub mod local;
pub mod plugin;
pub mod server;
