//! The `bulkhead` command's groups of subcommands, one module each (the server's own
//! commands are still in `main.rs`).

#[cfg(feature = "dev")]
pub mod drill;
pub mod plugin;
