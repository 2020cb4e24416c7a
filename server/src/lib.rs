//! Bulkhead: a vendor-neutral control-plane API server.
//!
//! Layers, outermost first: [`http`] (routes, middleware, OpenAPI) → [`app`] (what Bulkhead
//! does, with authorization close to each action) → [`entity`] and [`db`] (data access).
//! [`error::AppError`] is the one error type clients see.
//!
//! The routing table that travels to edges is `bulkhead-routing`; the edge agent
//! (`bulkhead-edge`), the command-line client (`bulkhead-cli`) and the host agent
//! (`bulkhead-agent`) are crates of their own, which the `bulkhead` binary also runs.

pub mod app;
pub mod auth;
pub mod authz;
pub mod config;
pub mod db;
#[cfg(feature = "dev")]
pub mod dev;
pub mod entity;
pub mod error;
pub mod http;
pub mod ids;
pub mod plugins;
pub mod resolver;
pub mod secrets;
pub mod server;
