//! The deploy reconciler: a background loop, woken by each change and by a timer, that
//! converges the instances at the providers towards the deployments in the database. Each pass
//! is idempotent, keeps nothing that matters in memory, and costs what it does, not what is
//! queued (each step reads a bounded batch through an index; a full batch runs the next pass at
//! once):
//!
//! 1. **place** queued deployments, oldest first, [`PLACE_PER_PASS`] at a time: choose provider
//!    and region for each missing instance ([`crate::app::deploys::placement`]) and store the instance with
//!    its key and its turn in the queue ([`crate::app::deploys::queue`]) *before* any provider is
//!    called; deployments waiting for room are looked at again every [`WAITING_RETRY`];
//! 2. **drain**: instances out of the routes for the grace period go to removal;
//! 3. **evacuate** providers being evacuated ([`crate::app::deploys::evacuations`]), and **replace**
//!    instances unhealthy for a while ([`crate::app::deploys::replacement`]);
//! 4. **dispatch** provider operations (provision, deprovision) to the instances at the head of
//!    the queue, each claimed in the database by this runner for a while (so that several
//!    replicas never run one operation twice, and a runner that dies leaves it to the next: a
//!    replica that becomes the deploys' leader releases every other runner's claims at once),
//!    within the limits of [`crate::app::shared::backpressure`] — unless the operator paused the pipeline.
//!
//! A rollout **settles** (the deployment is healthy, the one it replaces superseded and its
//! instances drained: [`deployment_settle`]) in the transaction that makes its last instance
//! healthy; a sweep every [`SETTLE_SWEEP_EVERY`] settles any that a crash left unsettled.
//!
//! A crash at any point is safe: provisioning is idempotent on the stored key, removal is
//! idempotent, and every transition is a compare-and-set on the state the pass saw.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

mod dispatch;
mod drain;
mod place;

use crate::app::App;
use crate::app::deploys::queue;
use crate::app::deploys::rollouts::SETTLE_SWEEP_EVERY;
use crate::app::shared::backpressure::Throttle;
use crate::config::DeploySettings;
use crate::error::AppResult;
use crate::ids::InstanceId;

/// Deployments placed in one pass at most (oldest first; a full batch runs the next pass at
/// once).
pub const PLACE_PER_PASS: usize = 256;
/// How often deployments waiting for room (no provider can take their instances) are looked
/// at again.
pub const WAITING_RETRY: Duration = Duration::from_secs(2);
/// How often the queue's depth is counted for the status and `/metrics`.
const QUEUE_COUNT_EVERY: Duration = Duration::from_secs(1);

/// What a pass did that decides when the next runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct PassOutcome {
    /// A step had more to do than one pass takes: the next pass runs at once.
    pub more: bool,
    /// Operations held back by a rate may go this soon.
    pub held_for: Option<Duration>,
}

/// What placement needs of a plugin: its regions, and whether it builds code from a repository.
type PluginPlacement = (Vec<String>, bool);

/// What an operator sees of the reconciler of this server.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct ReconcilerStatus {
    /// This runner's id (claims in the database name it).
    pub runner: String,
    pub last_pass_at: Option<DateTime<Utc>>,
    pub passes: u64,
    /// Instances waiting for a provider operation (all runners).
    pub queue_depth: u64,
    /// Provider operations running on this server, by provider.
    pub in_flight: BTreeMap<String, u64>,
    /// The limit on operations in flight.
    pub concurrency: usize,
    /// The latest errors of passes and operations, newest last (at most 20).
    pub recent_errors: Vec<String>,
}

/// The reconciler's state in this server: its limits and what it is doing now.
pub struct Reconciler {
    pub runner: String,
    pub throttle: Throttle,
    pub settings: DeploySettings,
    status: Mutex<ReconcilerStatus>,
    errors: Mutex<VecDeque<String>>,
    /// Instances with an operation running here, and their provider.
    in_flight: Mutex<HashMap<InstanceId, String>>,
    /// Regions of each provider's plugin, and whether it builds code, by plugin digest.
    regions: Mutex<HashMap<(String, String), PluginPlacement>>,
    drain_rate: Mutex<f64>,
    /// When the steps that run now and then last ran (none: at the next pass).
    waiting_placed_at: Mutex<Option<Instant>>,
    swept_at: Mutex<Option<Instant>>,
    counted_at: Mutex<Option<Instant>>,
}

impl Reconciler {
    /// The reconciler of replica `runner` (claims in the database name it).
    pub fn new(settings: DeploySettings, runner: String) -> Self {
        Self {
            throttle: Throttle::new(settings.concurrency, settings.provider_rate),
            status: Mutex::new(ReconcilerStatus {
                runner: runner.clone(),
                concurrency: settings.concurrency,
                ..Default::default()
            }),
            runner,
            settings,
            errors: Mutex::default(),
            in_flight: Mutex::default(),
            regions: Mutex::default(),
            drain_rate: Mutex::new(0.0),
            waiting_placed_at: Mutex::default(),
            swept_at: Mutex::default(),
            counted_at: Mutex::default(),
        }
    }

    /// Whether a step that runs every `every` (last at `at`) is due now; marks it run.
    fn every(at: &Mutex<Option<Instant>>, every: Duration) -> bool {
        let mut at = at.lock().expect("not poisoned");
        let due = at.is_none_or(|last| last.elapsed() >= every);
        if due {
            *at = Some(Instant::now());
        }
        due
    }

    /// Records an error for the status (never a secret: provider error kinds and ids only).
    pub fn error_record(&self, error: String) {
        tracing::warn!(%error, "deploy reconciler");
        let mut errors = self.errors.lock().expect("not poisoned");
        errors.push_back(format!("{} {error}", Utc::now().to_rfc3339()));
        while errors.len() > 20 {
            errors.pop_front();
        }
    }

    pub fn status(&self) -> ReconcilerStatus {
        let mut status = self.status.lock().expect("not poisoned").clone();
        status.recent_errors = self
            .errors
            .lock()
            .expect("not poisoned")
            .iter()
            .cloned()
            .collect();
        status.in_flight = BTreeMap::new();
        for provider in self.in_flight.lock().expect("not poisoned").values() {
            *status.in_flight.entry(provider.clone()).or_default() += 1;
        }
        status
    }

    /// Marks `instance` as having an operation here; false if it already has one.
    pub(crate) fn op_begin(&self, instance: InstanceId, provider: &str) -> bool {
        let mut in_flight = self.in_flight.lock().expect("not poisoned");
        if in_flight.contains_key(&instance) {
            return false;
        }
        in_flight.insert(instance, provider.to_owned());
        metrics::gauge!("deploy_operations_in_flight", "provider" => provider.to_owned())
            .increment(1.0);
        true
    }

    pub(crate) fn op_end(&self, instance: InstanceId) {
        if let Some(provider) = self
            .in_flight
            .lock()
            .expect("not poisoned")
            .remove(&instance)
        {
            metrics::gauge!("deploy_operations_in_flight", "provider" => provider).decrement(1.0);
        }
    }
}

impl App {
    /// What a replica does on becoming the deploys' leader, before its first pass: it sweeps
    /// at once (its predecessor may have left a rollout unsettled) and takes up the operations
    /// its predecessor had claimed.
    pub async fn reconciler_lead_taken(&self) {
        *self.reconciler.swept_at.lock().expect("not poisoned") = None;
        match self.claims_of_others_release().await {
            Ok(0) => {}
            Ok(released) => tracing::info!(
                released,
                "deploys: took up the operations a previous leader had claimed"
            ),
            // They lapse on their own (claim_ttl).
            Err(err) => self
                .reconciler
                .error_record(format!("releasing earlier claims: {err}")),
        }
    }

    /// One pass: see the module documentation.
    pub async fn reconcile_pass(&self) -> AppResult<PassOutcome> {
        let control = self.deploy_control().await?;
        {
            let mut rate = self.reconciler.drain_rate.lock().expect("not poisoned");
            if *rate != control.drain_rate {
                self.reconciler.throttle.drain_rate_set(control.drain_rate);
                *rate = control.drain_rate;
            }
        }
        let mut pass = PassOutcome {
            more: self.deployments_place().await?,
            held_for: None,
        };
        pass.more |= self.instances_drained_remove().await?;
        if Reconciler::every(&self.reconciler.swept_at, SETTLE_SWEEP_EVERY) {
            self.deployments_settle_sweep().await?;
        }
        self.evacuations_advance().await?;
        self.instances_unhealthy_replace().await?;
        if !control.paused {
            let (more, held_for) = self.operations_dispatch().await?;
            pass.more |= more;
            pass.held_for = held_for;
        }
        let mut status = self.reconciler.status.lock().expect("not poisoned").clone();
        if Reconciler::every(&self.reconciler.counted_at, QUEUE_COUNT_EVERY) {
            status.queue_depth = queue::due_count(&self.db, Utc::now()).await?;
            metrics::gauge!("deploy_queue_depth").set(status.queue_depth as f64);
        }
        metrics::gauge!("deploy_reconciler_last_pass_timestamp_seconds")
            .set(Utc::now().timestamp() as f64);
        status.last_pass_at = Some(Utc::now());
        status.passes += 1;
        *self.reconciler.status.lock().expect("not poisoned") = status;
        Ok(pass)
    }
}
