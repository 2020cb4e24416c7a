//! Application services: what Bulkhead does, apart from HTTP and from SQL.
//!
//! The code is grouped by domain, one folder each; within a folder, one module per resource
//! adds methods to [`App`] named resource-first, then verb (`project_create`, `service_list`,
//! …). Each method authorizes its caller itself, close to the action, and writes its audit
//! event in the same transaction as the change it records.
//!
//! | folder | what it owns |
//! | --- | --- |
//! | [`identity`] | users, sessions, API tokens, terms of service, sign-in (password and outside) |
//! | [`projects`] | projects, members, invitations, environments, services, domains |
//! | [`deploys`] | deployments, their events and streams, the queue, placement, rollouts, evacuations, the reconciler, instance health |
//! | [`providers`] | providers, their plugin versions and binaries, their health (breaker), their instances |
//! | [`routing`] | the routing table, its signing keys, edges |
//! | [`git`] | git installations, push intake, commit statuses |
//! | [`webhooks`] | outbound webhook endpoints, messages and their delivery |
//! | [`cluster`] | replicas, leases of background work, the change feed between replicas |
//! | [`background`] | the driver of background tasks, and the list of them |
//! | [`shared`] | what every domain uses: audit, pagination, idempotency, validation, throttles, outbound address checks |
//!
//! Imports between folders run one way, down this list (a test keeps it so): `background`
//! and `status` use any folder; `git` and `routing` use `deploys`; `deploys` uses `projects`
//! and `webhooks`; `webhooks` uses `projects`; `projects` uses `identity`; `identity`,
//! `providers` and the rest use `cluster` and `shared`, which use no other folder.

pub mod background;
pub mod cluster;
pub mod deploys;
pub mod git;
pub mod identity;
pub mod projects;
pub mod providers;
pub mod routing;
pub mod shared;
pub mod status;
pub mod webhooks;

use std::sync::Arc;

use sea_orm::DatabaseConnection;

use crate::auth::JwtKeys;
use crate::config::Settings;
use crate::plugins::registry::ProviderRegistry;

/// The application: shared by every request.
#[derive(Clone)]
pub struct App {
    pub db: DatabaseConnection,
    /// On PostgreSQL, the server that accepts writes, followed across failovers.
    pub primary: Option<Arc<crate::db::Primary>>,
    pub jwt: Arc<JwtKeys>,
    pub settings: Arc<Settings>,
    /// The plugin host and each provider's running plugin.
    pub providers: Arc<ProviderRegistry>,
    /// Each provider's circuit breaker.
    pub health: Arc<providers::health::HealthBoard>,
    /// Login rate limits and the password-hashing cap.
    pub login: Arc<identity::sign_in::throttle::LoginThrottle>,
    /// Verified credentials and project accesses (see [`identity::auth_cache`]).
    pub auth_cache: Arc<identity::auth_cache::AuthCache>,
    /// Seals and opens secrets at rest.
    pub secrets: Arc<crate::secrets::SecretBox>,
    /// Change notifications, here and (through the change feed) from other replicas.
    pub changes: cluster::changes::Changes,
    /// Turns true when the server begins to stop (event streams end, loops return).
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// The deploy reconciler's limits and state in this server.
    pub reconciler: Arc<deploys::reconciler::Reconciler>,
    /// The routing table this server serves.
    pub routing: Arc<routing::RoutingState>,
    /// This replica's id and the leases of background work it holds.
    pub leases: Arc<cluster::leases::Leases>,
    /// The deployments this server's event streams follow.
    pub deployment_watch: Arc<deploys::watch::DeploymentWatch>,
    /// Followers of each project's logs on this replica, bounded.
    pub log_followers: Arc<deploys::logs::LogFollowers>,
    /// Each account's usual sign-in addresses, as this replica last read them.
    pub known_addresses: Arc<identity::sign_in::addresses::KnownAddresses>,
    /// Asks DNS for domains' verification records.
    pub challenges: Arc<projects::domain_verification::ChallengeResolver>,
    /// Calls to forges (commit statuses), within their limits.
    pub forge: Arc<git::statuses::ForgeCalls>,
    /// Calls to outside identity providers, within their limits.
    pub sign_in: Arc<identity::sign_in::calls::OutsideSignIn>,
    /// The status of each background task of this server.
    pub tasks: Arc<background::driver::TaskBoard>,
    /// Rows' views kept serialized, for lists (see [`shared::view_cache`]).
    pub view_cache: Arc<shared::view_cache::ViewCache>,
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// Each folder (or root module) of `app/`, and the folders it may use: a folder uses only
    /// those listed after it in this order.
    const LAYERS: &[&str] = &[
        "status",
        "background",
        "git",
        "routing",
        "deploys",
        "webhooks",
        "projects",
        "identity",
        "providers",
        "cluster",
        "shared",
    ];

    fn rust_files(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.push(path);
            }
        }
    }

    #[test]
    fn imports_between_folders_run_one_way() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/app");
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in files {
            let relative = file.strip_prefix(&root).unwrap();
            let folder = relative.iter().next().unwrap().to_string_lossy();
            let folder = folder.trim_end_matches(".rs").to_owned();
            if folder == "mod" {
                continue; // `App` itself holds a part of every folder.
            }
            let text = std::fs::read_to_string(&file).unwrap();
            // Tests may reach anywhere.
            let code = text.split("\n#[cfg(test)]").next().unwrap();
            for (at, _) in code.match_indices("crate::app::") {
                let used: String = code[at + "crate::app::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if used != folder && used != "App" {
                    uses.entry(folder.clone()).or_default().insert(used);
                }
            }
        }
        let rank = |name: &str| {
            LAYERS
                .iter()
                .position(|layer| *layer == name)
                .unwrap_or_else(|| panic!("`app/{name}` is in no layer of LAYERS"))
        };
        for (folder, used) in &uses {
            for target in used {
                assert!(
                    rank(target) > rank(folder),
                    "app/{folder} uses app/{target}, which comes before it in LAYERS: \
                     imports between folders must run one way"
                );
            }
        }
    }
}
