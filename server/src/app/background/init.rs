//! Every background task of a server, registered in one place: its name, what it does, when
//! it runs, what wakes it and the lease it needs. `GET /v1/status` lists them in this order's
//! names (alphabetically); `docs/background-tasks.md` says how to add one.

use sea_orm::{DatabaseConnection, DbBackend};

use crate::app::App;
use crate::app::background::driver::{
    BackgroundTask, Driver, LeaseNeed, Schedule, TaskDefinition, TaskMaker,
};
use crate::app::background::maintenance::{PURGE_EVERY, TRIM_EVERY};
use crate::app::background::tasks::{self, LeaseRenewal, Routing, Step, StepFn};
use crate::app::cluster::changes::Kind;
use crate::app::cluster::leases::{RENEW_EVERY, Work};
use crate::app::deploys::watch::WATCH_EVERY;
use crate::app::git::intake_worker::INTAKE_EVERY;
use crate::app::git::statuses::STATUSES_EVERY;
use crate::app::providers::sync::SYNC_EVERY;
use crate::app::routing::REFRESH_EVERY;
use crate::app::webhooks::delivery::DELIVER_EVERY;

fn step(activate: StepFn) -> TaskMaker {
    Box::new(move || Box::new(Step(activate)) as Box<dyn BackgroundTask>)
}

/// Every task of `app`'s server; `leases_db` is the replica's own connection for its leases,
/// `advertised` the address its heartbeat gives.
pub fn definitions(
    app: &App,
    leases_db: DatabaseConnection,
    advertised: String,
) -> Vec<TaskDefinition> {
    let mut definitions = vec![
        TaskDefinition {
            name: "leases",
            description: "Renews this replica's leases of background work and its heartbeat; \
                          takes the leases that lapsed; hands them over when the server stops.",
            schedule: Schedule::Every(RENEW_EVERY),
            wake: &[],
            lease: LeaseNeed::None,
            // A lease lapses 1.5 s after its last renewal: the renewal never waits longer.
            backoff_cap: Some(RENEW_EVERY),
            make: Box::new(move || {
                Box::new(LeaseRenewal {
                    db: leases_db.clone(),
                    address: advertised.clone(),
                    heartbeat_at: None,
                })
            }),
        },
        TaskDefinition {
            name: "deploys",
            description: "The deploy reconciler: places queued deployments, drains, evacuates, \
                          replaces unhealthy instances and dispatches provider operations within \
                          the pipeline's limits.",
            schedule: Schedule::Every(app.reconciler.settings.reconcile_interval),
            wake: &[Kind::Deployments],
            lease: LeaseNeed::Leads(Work::Deploys),
            backoff_cap: None,
            make: step(tasks::deploys_reconcile),
        },
        TaskDefinition {
            name: "push_intake",
            description: "Turns queued git deliveries into deployments, oldest first.",
            schedule: Schedule::Every(INTAKE_EVERY),
            wake: &[Kind::Deployments],
            lease: LeaseNeed::Leads(Work::Deploys),
            backoff_cap: None,
            make: step(tasks::push_intake),
        },
        TaskDefinition {
            name: "commit_statuses",
            description: "Reports deployments' states to their forges as commit statuses, \
                          within each installation's limits.",
            schedule: Schedule::Every(STATUSES_EVERY),
            wake: &[Kind::Deployments],
            lease: LeaseNeed::Leads(Work::Deploys),
            backoff_cap: None,
            make: step(tasks::commit_statuses),
        },
        TaskDefinition {
            name: "webhook_deliveries",
            description: "Sends the due outbound webhook messages, each endpoint's in order.",
            schedule: Schedule::Every(DELIVER_EVERY),
            wake: &[Kind::Deployments],
            lease: LeaseNeed::Leads(Work::Deploys),
            backoff_cap: None,
            make: step(tasks::webhook_deliveries),
        },
        TaskDefinition {
            name: "instance_health",
            description: "Checks deployed instances' workloads (or takes the reports of \
                          providers that check them near the workload) and acts on the verdicts.",
            schedule: Schedule::Continuous,
            wake: &[],
            lease: LeaseNeed::Shares(Work::InstanceHealth),
            backoff_cap: None,
            make: step(tasks::instance_health),
        },
        TaskDefinition {
            name: "routing",
            description: "Publishes routing revisions when routes change (on the routing \
                          leader) and serves the latest published (on every replica).",
            schedule: Schedule::Every(REFRESH_EVERY),
            wake: &[Kind::Routes, Kind::Routing],
            lease: LeaseNeed::Shares(Work::Routing),
            // Edges follow what this replica serves: it never stays behind for long.
            backoff_cap: Some(REFRESH_EVERY),
            make: Box::new(|| Box::new(Routing::default())),
        },
        TaskDefinition {
            name: "deployment_streams",
            description: "Wakes the deployment event streams of this replica whose deployment \
                          changed.",
            schedule: Schedule::Every(WATCH_EVERY),
            wake: &[Kind::Deployments],
            lease: LeaseNeed::None,
            backoff_cap: Some(WATCH_EVERY * 4),
            make: step(tasks::deployment_streams),
        },
        TaskDefinition {
            name: "provider_sync",
            description: "Loads the providers' plugins and settings changed through other \
                          replicas, and their health.",
            schedule: Schedule::Every(SYNC_EVERY),
            wake: &[Kind::Providers],
            lease: LeaseNeed::None,
            backoff_cap: None,
            make: step(tasks::provider_sync),
        },
        TaskDefinition {
            name: "provider_probes",
            description: "Probes each provider's API when its probe is due, feeding its \
                          circuit breaker.",
            schedule: Schedule::Every(app.health.probe_tick()),
            wake: &[],
            lease: LeaseNeed::Leads(Work::ProviderProbes),
            backoff_cap: None,
            make: step(tasks::provider_probes),
        },
        TaskDefinition {
            name: "maintenance",
            description: "Purges expired records: idempotency keys, invitations, silent \
                          replicas, sign-in addresses and states, old git deliveries.",
            schedule: Schedule::Every(PURGE_EVERY),
            wake: &[],
            lease: LeaseNeed::Leads(Work::Maintenance),
            backoff_cap: None,
            make: step(tasks::maintenance_purge),
        },
        TaskDefinition {
            name: "login_limiter_trim",
            description: "Forgets the login limiter's clients that stopped trying (this \
                          replica's memory).",
            schedule: Schedule::Every(TRIM_EVERY),
            wake: &[],
            lease: LeaseNeed::None,
            backoff_cap: None,
            make: step(tasks::login_limiter_trim),
        },
    ];
    if app.db.get_database_backend() == DbBackend::Postgres {
        definitions.extend([
            TaskDefinition {
                name: "database_primary",
                description: "Asks the database's primary every 0.5 s whether it still is; \
                              when it is not, finds the server that accepts writes among those \
                              the database URL names and points every pool there.",
                schedule: Schedule::Continuous,
                wake: &[],
                lease: LeaseNeed::None,
                backoff_cap: None,
                make: step(tasks::database_primary),
            },
            TaskDefinition {
                name: "change_feed_listen",
                description: "Listens to the other replicas' changes (PostgreSQL \
                              notifications), resyncing after every reconnection.",
                schedule: Schedule::Continuous,
                wake: &[],
                lease: LeaseNeed::None,
                backoff_cap: None,
                make: step(tasks::change_feed_listen),
            },
            TaskDefinition {
                name: "change_feed_tell",
                description: "Tells the other replicas what changed here, a burst of changes \
                               in one notification per kind.",
                schedule: Schedule::Continuous,
                wake: &[],
                lease: LeaseNeed::None,
                backoff_cap: None,
                make: step(tasks::change_feed_tell),
            },
        ]);
    }
    definitions
}

/// Starts every task of `app`'s server.
pub fn tasks_start(app: &App, leases_db: DatabaseConnection, advertised: String) -> Driver {
    Driver::start(app, definitions(app, leases_db, advertised))
}
