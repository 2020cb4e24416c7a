//! The `bulkhead` command's groups of subcommands, one module each. The top-level list of
//! commands and their dispatch are in `main.rs`.
//!
//! Server-side commands (they run things on this machine): `server` (serve, migrate, secrets,
//! openapi), `local` (dev, hello) and `drill` (the outage drill) — both only with the default
//! `dev` feature —, `agent`, `edge`, `plugin` (plugin authors' tools).
//!
//! Client commands (they drive a running server through the generated Rust client): `login`,
//! `projects`, `services`, `deployments` (deploy and deployments), `providers`, `routes`,
//! `tokens`; with what they share: `connection` (flags, credentials, calls), `credentials`,
//! `resolve` (names to ids), `follow` (event streams), `output` and `exit`.

pub mod agent;
#[cfg(feature = "dev")]
pub mod drill;
pub mod edge;
#[cfg(feature = "dev")]
pub mod local;
pub mod plugin;
pub mod process;
pub mod server;

pub mod connection;
pub mod credentials;
pub mod deployments;
pub mod exit;
pub mod follow;
pub mod login;
pub mod output;
pub mod projects;
pub mod providers;
pub mod resolve;
pub mod routes;
pub mod services;
pub mod tokens;

/// What `bulkhead --help` ends with: the environment the client commands read, and the exit
/// statuses.
pub fn help_footer() -> String {
    format!(
        "Client commands read BULKHEAD_URL (the server) and BULKHEAD_TOKEN (an API token), which \
         take precedence over the credentials `bulkhead login` stores in \
         BULKHEAD_CONFIG_DIR/credentials.json (default: the user's config directory, \
         bulkhead/credentials.json); a --server flag takes precedence over both, and stored \
         credentials are sent only to the server that issued them.\n\n{}",
        exit::Exit::help()
    )
}
