//! What every Bulkhead process shares, whatever else it is made of: the control plane, the
//! host agent, the edge agent and the command-line client each use some of it, and none of it
//! knows any of them.
//!
//! - [`files`]: private directories and atomic, durable writes of state files;
//! - [`secret_file`]: secrets (tokens, keys) read from files only their owner may read;
//! - [`names`]: the slug rule of ids chosen by people (providers, edges);
//! - [`health_check`]: the bounds of a workload's health check (the server's and the agent's);
//! - [`git_source`]: the rule of a repository URL code is fetched from (the same two sides);
//! - [`process`] (feature `process`): logs to stderr, and the signals that stop a command;
//! - [`metrics`] (feature `metrics`): the process-wide Prometheus recorder;
//! - [`tls`]: one crypto provider (ring), clients that verify the servers they reach (the
//!   platform's roots, or a private CA), and (feature `tls-server`) servers whose certificate is
//!   re-read when its files change;
//! - [`serve`] (feature `tls-server`): serving a router with every connection bounded in time
//!   and number, so that slow or hostile clients cannot take a server down.

pub mod files;
pub mod git_source;
pub mod health_check;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod names;
#[cfg(feature = "process")]
pub mod process;
pub mod secret_file;
#[cfg(feature = "tls-server")]
pub mod serve;
pub mod size;
pub mod tls;
