//! The `bulkhead` command's own groups of subcommands, one module each: `server` (serve,
//! migrate, secrets, openapi), `local` (dev, hello) and `drill` (the outage drill) — both only
//! with the default `dev` feature —, and `plugin` (plugin authors' tools). The top-level list of
//! commands and their dispatch are in `main.rs`; the client commands are `bulkhead-cli`, the
//! host agent `bulkhead-agent` and the edge agent `bulkhead-edge`, and the control plane itself
//! is `bulkhead-server` (the library `bulkhead`).
//!
//! A library rather than modules of the binary: it compiles while the server library is still
//! being optimized, where a binary's own code would wait for every library it links.

#[cfg(feature = "dev")]
pub mod drill;
#[cfg(feature = "dev")]
pub mod local;
pub mod plugin;
pub mod server;

/// The plugins this binary bundles (the `bulkhead-bundled-plugins` crate), as the server takes
/// them.
pub fn bundled_plugins() -> bulkhead::plugins::bundled::BundledPlugins {
    bulkhead::plugins::bundled::BundledPlugins(bulkhead_bundled_plugins::WASM)
}
