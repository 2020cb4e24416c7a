//! Application services: what Bulkhead does, apart from HTTP and from SQL.
//!
//! One module per resource adds methods to [`App`] named resource-first, then verb
//! (`project_create`, `service_list`, …). Each method authorizes its caller itself, close to the
//! action, and writes its audit event in the same transaction as the change it records.

pub mod audit;
pub mod auth_cache;
pub mod backpressure;
pub mod bootstrap;
pub mod breaker;
pub mod change_feed;
pub mod changes;
pub mod deploy_pipeline;
pub mod deploy_queue;
pub mod deployment_events;
pub mod deployment_watch;
pub mod deployments;
pub mod domain_verification;
pub mod domains;
pub mod edges;
pub mod environments;
pub mod evacuations;
pub mod forge_statuses;
pub mod git_installations;
pub mod health_checks;
pub mod health_reports;
pub mod health_schedule;
pub mod idempotency;
pub mod instance_health;
pub mod instance_operations;
pub mod instances;
pub mod invitations;
pub mod leases;
pub mod login_throttle;
pub mod maintenance;
pub mod members;
pub mod outbound_addresses;
pub mod outside_sign_in;
pub mod pagination;
pub mod placement;
pub mod plugin_binaries;
pub mod project_write;
pub mod projects;
pub mod provider_health;
pub mod provider_instances;
pub mod provider_sync;
pub mod provider_versions;
pub mod providers;
pub mod push_intake;
pub mod reconciler;
pub mod replicas;
pub mod rollouts;
pub mod routing;
pub mod routing_keys;
pub mod services;
pub mod sessions;
pub mod sign_in_addresses;
pub mod sign_in_holds;
pub mod states;
pub mod terms;
pub mod tokens;
pub mod unhealthy_replacement;
pub mod users;
pub mod webhook_delivery;
pub mod webhooks;

use std::sync::Arc;

use sea_orm::DatabaseConnection;

use crate::auth::JwtKeys;
use crate::config::Settings;
use crate::error::{ApiError, ApiResult};
use crate::plugins::registry::ProviderRegistry;

/// The application: shared by every request.
#[derive(Clone)]
pub struct App {
    pub db: DatabaseConnection,
    pub jwt: Arc<JwtKeys>,
    pub settings: Arc<Settings>,
    /// The plugin host and each provider's running plugin.
    pub providers: Arc<ProviderRegistry>,
    /// Each provider's circuit breaker.
    pub health: Arc<provider_health::HealthBoard>,
    /// Login rate limits and the password-hashing cap.
    pub login: Arc<login_throttle::LoginThrottle>,
    /// Verified credentials and project accesses (see [`auth_cache`]).
    pub auth_cache: Arc<auth_cache::AuthCache>,
    /// Seals and opens secrets at rest.
    pub secrets: Arc<crate::secrets::SecretBox>,
    /// Change notifications, here and (through the change feed) from other replicas.
    pub changes: changes::Changes,
    /// Turns true when the server begins to stop (event streams end, loops return).
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// The deploy reconciler's limits and state in this server.
    pub reconciler: Arc<reconciler::Reconciler>,
    /// The routing table this server serves.
    pub routing: Arc<routing::RoutingState>,
    /// This replica's id and the leases of background work it holds.
    pub leases: Arc<leases::Leases>,
    /// The deployments this server's event streams follow.
    pub deployment_watch: Arc<deployment_watch::DeploymentWatch>,
    /// Each account's usual sign-in addresses, as this replica last read them.
    pub known_addresses: Arc<sign_in_addresses::KnownAddresses>,
    /// Asks DNS for domains' verification records.
    pub challenges: Arc<domain_verification::ChallengeResolver>,
    /// Calls to forges (commit statuses), within their limits.
    pub forge: Arc<forge_statuses::ForgeCalls>,
    /// Calls to outside identity providers, within their limits.
    pub sign_in: Arc<outside_sign_in::OutsideSignIn>,
}

/// A strong entity tag for a resource at `revision`.
pub fn etag_for(revision: i64) -> String {
    format!("\"r{revision}\"")
}

/// Checks an `If-Match` precondition against a resource's current `revision`.
pub fn if_match_check(if_match: Option<&str>, revision: i64) -> ApiResult<()> {
    match if_match {
        None => Ok(()),
        Some(value) if value.trim() == "*" => Ok(()),
        Some(value) if value.split(',').any(|tag| tag.trim() == etag_for(revision)) => Ok(()),
        Some(_) => Err(ApiError::precondition_failed()),
    }
}

/// Trims `value` and checks it is 1..=`max` characters with no control characters.
pub fn text_validate(field: &str, value: &str, max: usize) -> ApiResult<String> {
    let value = value.trim();
    if value.is_empty() {
        return Err(ApiError::invalid(format!("`{field}` must not be empty")));
    }
    if value.chars().count() > max {
        return Err(ApiError::invalid(format!(
            "`{field}` must be at most {max} characters"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "`{field}` must not contain control characters"
        )));
    }
    Ok(value.to_owned())
}

/// Checks a DNS-label-style name: lowercase letters, digits and `-`, 1..=63, starting with a letter.
pub fn slug_validate(field: &str, value: &str) -> ApiResult<String> {
    bulkhead_common::names::slug_validate(field, value).map_err(ApiError::invalid)?;
    Ok(value.to_owned())
}
