//! The integration tests: one binary, one file per area. Each test starts the real server on
//! 127.0.0.1:0 with a fresh database and talks HTTP to it; database tests run on SQLite and,
//! when `BULKHEAD_TEST_POSTGRES_URL` is set, on PostgreSQL.

mod node;
mod support;

mod audit;
mod auth;
mod background;
mod capacity;
mod cli;
mod cli_client;
mod clients_typescript;
mod clouds;
mod connections;
mod contracts;
mod conventions;
mod coverage;
mod dashboard;
mod database_failover;
mod deploy_crashes;
mod deployments;
mod domains;
mod drill;
mod edge;
mod edge_https;
mod git_intake;
mod git_source;
mod instance_health;
mod limits;
mod logs;
mod members;
mod migrations;
mod openid_connect;
mod ops;
mod plugin_tools;
mod plugins;
mod postgres_restart;
mod projects;
mod providers;
mod replica_changes;
mod replicas;
mod resources;
mod revocation;
mod routing;
mod rust_client;
mod secrets;
mod security;
mod sign_in;
mod sizes;
mod terms;
mod tls;
mod webhooks;
