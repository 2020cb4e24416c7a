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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Set,
};
use serde::Serialize;
use tokio::sync::watch;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::deployments::{self, deployment_finish};
use crate::app::deploys::events::{DeploymentEventKind, event_append};
use crate::app::deploys::instances::{self as states, instance_key_new};
use crate::app::deploys::placement::{Candidate, Slot, place};
use crate::app::deploys::queue;
use crate::app::deploys::rollouts::{SETTLE_SWEEP_EVERY, deployment_settle};
use crate::app::projects::services::spec::ServiceSpec;
use crate::app::shared::backpressure::{Throttle, Wait};
use crate::config::DeploySettings;
use crate::entity::{deployment, evacuation, instance, provider, service};
use crate::error::{ApiError, ApiResult};

/// Deployments placed in one pass at most (oldest first; a full batch runs the next pass at
/// once).
pub const PLACE_PER_PASS: usize = 256;
/// How often deployments waiting for room (no provider can take their instances) are looked
/// at again.
pub const WAITING_RETRY: Duration = Duration::from_secs(2);
/// Drained instances sent to removal in one pass at most.
const DRAINED_PER_PASS: usize = 256;
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
    in_flight: Mutex<HashMap<Uuid, String>>,
    /// Regions of each provider's plugin, by plugin digest.
    regions: Mutex<HashMap<(String, String), Vec<String>>>,
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
    pub(crate) fn op_begin(&self, instance: Uuid, provider: &str) -> bool {
        let mut in_flight = self.in_flight.lock().expect("not poisoned");
        if in_flight.contains_key(&instance) {
            return false;
        }
        in_flight.insert(instance, provider.to_owned());
        metrics::gauge!("deploy_operations_in_flight", "provider" => provider.to_owned())
            .increment(1.0);
        true
    }

    pub(crate) fn op_end(&self, instance: Uuid) {
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
    /// The reconciler loop, until the server stops.
    pub async fn reconciler_run(self, mut stop: watch::Receiver<bool>) {
        let mut wake = self.changes.deployments.subscribe();
        let mut tick = tokio::time::interval(self.reconciler.settings.reconcile_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // When operations held back by a rate may go: the next pass is due then, not at the
        // next tick (or the drain rate would be capped at one operation a tick).
        let mut due_at: Option<tokio::time::Instant> = None;
        let mut leading = false;
        loop {
            let due = async {
                match due_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.changed() => {
                    if *stop.borrow() {
                        return;
                    }
                }
                changed = wake.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tick.tick() => {}
                _ = due => {}
            }
            // Another replica leads: this one only waits to take over.
            if !self.leases.leads(Work::Deploys) {
                due_at = None;
                leading = false;
                continue;
            }
            if !leading {
                leading = true;
                // A new leader sweeps at once: its predecessor may have left a rollout
                // unsettled.
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
                        .error_record(format!("releasing earlier claims: {}", err.detail)),
                }
            }
            due_at = match self.reconcile_pass().await {
                Ok(pass) if pass.more => Some(tokio::time::Instant::now()),
                Ok(pass) => pass.held_for.map(|wait| tokio::time::Instant::now() + wait),
                Err(err) => {
                    self.reconciler
                        .error_record(format!("pass failed: {}", err.detail));
                    None
                }
            };
        }
    }

    /// One pass: see the module documentation.
    pub async fn reconcile_pass(&self) -> ApiResult<PassOutcome> {
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

    /// Providers that may take new instances now (enabled, not drained, not evacuated, breaker
    /// closed, a plugin serving), with their plugins' regions.
    pub(crate) async fn placement_candidates(&self) -> ApiResult<Vec<Candidate>> {
        let evacuating: HashSet<String> = evacuation::Entity::find()
            .filter(evacuation::Column::State.eq("running"))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|e| e.provider)
            .collect();
        let rows = provider::Entity::find()
            .filter(provider::Column::Enabled.eq(true))
            .filter(provider::Column::Drained.eq(false))
            .all(&self.db)
            .await?;
        let mut candidates = Vec::new();
        for row in rows {
            if evacuating.contains(&row.name) || self.health.call_check(&row).is_err() {
                continue;
            }
            let Some(active) = self.providers.active(&row.name) else {
                continue;
            };
            let cache_key = (row.name.clone(), active.plugin.digest.clone());
            let cached = self
                .reconciler
                .regions
                .lock()
                .expect("not poisoned")
                .get(&cache_key)
                .cloned();
            let regions = match cached {
                Some(regions) => regions,
                None => match self
                    .providers
                    .host
                    .plugin_info(&active.plugin, &active.env)
                    .await
                {
                    Ok(info) => {
                        self.reconciler
                            .regions
                            .lock()
                            .expect("not poisoned")
                            .insert(cache_key, info.regions.clone());
                        info.regions
                    }
                    Err(err) => {
                        self.reconciler
                            .error_record(format!("provider {}: info failed: {err}", row.name));
                        continue;
                    }
                },
            };
            candidates.push(Candidate {
                name: row.name,
                regions,
            });
        }
        Ok(candidates)
    }

    /// Gives deployments their missing instances: queued ones (and rolling-out ones sent back
    /// to place a replacement), oldest first, at most [`PLACE_PER_PASS`]; and every
    /// [`WAITING_RETRY`], those waiting for room. Answers whether more are queued than one
    /// pass placed.
    async fn deployments_place(&self) -> ApiResult<bool> {
        let mut found = deployment::Entity::find()
            .filter(
                Condition::any()
                    .add(deployment::Column::State.eq(deployments::QUEUED))
                    .add(
                        Condition::all()
                            .add(deployment::Column::State.eq(deployments::PLACING))
                            .add(deployment::Column::Reason.eq("")),
                    ),
            )
            .order_by_asc(deployment::Column::CreatedAt)
            .limit(PLACE_PER_PASS as u64 + 1)
            .all(&self.db)
            .await?;
        let more = found.len() > PLACE_PER_PASS;
        found.truncate(PLACE_PER_PASS);
        if Reconciler::every(&self.reconciler.waiting_placed_at, WAITING_RETRY) {
            found.extend(
                deployment::Entity::find()
                    .filter(deployment::Column::State.eq(deployments::PLACING))
                    .filter(deployment::Column::Reason.ne(""))
                    .order_by_asc(deployment::Column::CreatedAt)
                    .limit(PLACE_PER_PASS as u64)
                    .all(&self.db)
                    .await?,
            );
        }
        if found.is_empty() {
            return Ok(false);
        }
        let candidates = self.placement_candidates().await?;
        for found in found {
            if let Err(err) = self.deployment_place(found.id, &candidates).await {
                self.reconciler
                    .error_record(format!("placing deployment {}: {}", found.id, err.detail));
            }
        }
        Ok(more)
    }

    async fn deployment_place(&self, id: Uuid, candidates: &[Candidate]) -> ApiResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        let Some(found) = deployment::Entity::find_by_id(id)
            .filter(deployment::Column::State.is_in([deployments::QUEUED, deployments::PLACING]))
            .lock_exclusive()
            .one(&txn)
            .await?
        else {
            return Ok(());
        };
        let spec: ServiceSpec =
            serde_json::from_value(found.spec.clone()).map_err(ApiError::internal)?;
        let service_name = service::Entity::find_by_id(found.service_id)
            .one(&txn)
            .await?
            .map(|s| s.name)
            .unwrap_or_else(|| "service".into());
        let instances = instance::Entity::find()
            .filter(instance::Column::DeploymentId.eq(found.id))
            .all(&txn)
            .await?;
        let active = instances
            .iter()
            .filter(|i| states::ACTIVE.contains(&i.state.as_str()))
            .count() as u32;
        let needed = spec.replicas.saturating_sub(active);
        // Providers that refused an instance of this deployment are not asked again for it.
        let refused: HashSet<&str> = instances
            .iter()
            .filter(|i| i.last_error.starts_with("refused"))
            .map(|i| i.provider.as_str())
            .collect();
        let allowed: Vec<Candidate> = candidates
            .iter()
            .filter(|c| !refused.contains(c.name.as_str()))
            .cloned()
            .collect();
        let mut placed: BTreeMap<String, u32> = BTreeMap::new();
        for i in instances
            .iter()
            .filter(|i| states::ACTIVE.contains(&i.state.as_str()))
        {
            *placed.entry(i.provider.clone()).or_default() += 1;
        }
        // Failed instances not yet taken over: their replacements say whom they replace.
        let mut orphans: VecDeque<&instance::Model> = instances
            .iter()
            .filter(|i| {
                i.last_error.starts_with("refused")
                    && !instances.iter().any(|other| other.replaces == Some(i.id))
            })
            .collect();
        let state: String;
        let mut reason = found.reason.clone();
        let mut inserted = 0;
        if needed > 0 {
            match place(
                &spec.placement,
                &spec.regions,
                &allowed,
                &placed,
                needed as usize,
            ) {
                Ok(slots) => {
                    inserted += slots.len();
                    for slot in slots {
                        let takeover = orphans.pop_front().map(|old| (old, Takeover::Failover));
                        instance_insert(&txn, &found, &service_name, &slot, takeover).await?;
                    }
                    state = deployments::ROLLING_OUT.into();
                    reason = String::new();
                }
                Err(why) => {
                    let deadline = found.created_at
                        + ChronoDuration::seconds(i64::from(spec.health_check.start_timeout_secs));
                    if Utc::now() > deadline {
                        deployment_finish(
                            &txn,
                            &found,
                            deployments::FAILED,
                            format!("could not place {needed} instance(s): {why}; the previous version keeps serving"),
                        )
                        .await?;
                        txn.commit().await?;
                        self.changes.routes_changed([found.service_id]);
                        self.deployments_changed();
                        return Ok(());
                    }
                    state = deployments::PLACING.into();
                    if reason != why {
                        event_append(
                            &txn,
                            found.id,
                            DeploymentEventKind::DeploymentWaiting,
                            format!("waiting to place {needed} instance(s): {why}"),
                            serde_json::json!({ "needed": needed }),
                        )
                        .await?;
                        reason = why;
                    }
                }
            }
        } else {
            state = deployments::ROLLING_OUT.into();
        }
        let changed = state != found.state || reason != found.reason;
        if changed {
            if state != found.state {
                event_append(
                    &txn,
                    found.id,
                    if state == deployments::ROLLING_OUT {
                        DeploymentEventKind::DeploymentRollingOut
                    } else {
                        DeploymentEventKind::DeploymentPlacing
                    },
                    if state == deployments::ROLLING_OUT {
                        format!("rolling out {} instance(s)", spec.replicas)
                    } else {
                        "placing instances".into()
                    },
                    serde_json::json!({ "state": state }),
                )
                .await?;
            }
            deployment::Entity::update_many()
                .col_expr(deployment::Column::State, Expr::value(state.clone()))
                .col_expr(deployment::Column::Reason, Expr::value(reason))
                .col_expr(deployment::Column::UpdatedAt, Expr::value(Utc::now()))
                .col_expr(
                    deployment::Column::Revision,
                    Expr::col(deployment::Column::Revision).add(1),
                )
                .filter(deployment::Column::Id.eq(found.id))
                .exec(&txn)
                .await?;
        }
        // Nothing left to make (no replica, or all of them serve): it settles now.
        let settled = if state == deployments::ROLLING_OUT && inserted == 0 {
            deployment_settle(&txn, found.id).await?
        } else {
            None
        };
        txn.commit().await?;
        // A deployment still waiting for room changed nothing: waking the reconciler (and
        // the streams) for it would make the reconciler spin.
        if let Some(settled) = &settled {
            self.settled_notify(settled);
        } else if changed || inserted > 0 {
            self.deployments_changed();
        }
        Ok(())
    }

    /// Instances that have been out of the routes for the grace period go to removal, at most
    /// [`DRAINED_PER_PASS`] in one transaction; answers whether more are due.
    async fn instances_drained_remove(&self) -> ApiResult<bool> {
        let cutoff = Utc::now()
            - ChronoDuration::from_std(self.reconciler.settings.drain_grace)
                .map_err(ApiError::internal)?;
        let mut due = instance::Entity::find()
            .filter(instance::Column::State.eq(states::DRAINING))
            .filter(instance::Column::UpdatedAt.lte(cutoff))
            .limit(DRAINED_PER_PASS as u64 + 1)
            .all(&self.db)
            .await?;
        let more = due.len() > DRAINED_PER_PASS;
        due.truncate(DRAINED_PER_PASS);
        if due.is_empty() {
            return Ok(false);
        }
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        for row in &due {
            let moved =
                instance_transition(&txn, row, states::DRAINING, states::REMOVING, |u| u).await?;
            if moved {
                event_append(
                    &txn,
                    row.deployment_id,
                    DeploymentEventKind::InstanceRemoving,
                    format!("removing {} from {}", row.instance_key, row.provider),
                    serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider }),
                )
                .await?;
            }
        }
        txn.commit().await?;
        self.deployments_changed();
        Ok(more)
    }

    /// Starts provider operations on the instances at the head of the queue, as far as the
    /// limits allow, claimed in one transaction; answers whether the queue may have more for
    /// the free slots (the next pass runs at once), and how soon operations held back by a
    /// rate may go.
    async fn operations_dispatch(&self) -> ApiResult<(bool, Option<Duration>)> {
        let throttle = &self.reconciler.throttle;
        let free = throttle.limit().saturating_sub(throttle.in_flight());
        if free == 0 {
            return Ok((false, None));
        }
        let now = Utc::now();
        let providers = provider::Entity::find().all(&self.db).await?;
        // A removal waits while its provider is disabled or its breaker open (it would only
        // be refused, and its backoff grow); it goes as soon as the provider is back. A
        // provision goes anyway: its refusal fails it over to another provider.
        let unreachable: HashSet<&str> = providers
            .iter()
            .filter(|row| !row.enabled || self.health.call_check(row).is_err())
            .map(|row| row.name.as_str())
            .collect();
        // Providers that asked to wait are not read at all: their instances would fill the
        // page.
        let mut held_for: Option<Duration> = None;
        let mut waiting: HashSet<String> = HashSet::new();
        for row in &providers {
            if let Some(wait) = throttle.provider_held_for(&row.name) {
                held_for = Some(held_for.map_or(wait, |held| held.min(wait)));
                waiting.insert(row.name.clone());
            }
        }
        let page = (free * 4 + 16) as u64;
        let head = queue::due_head(&self.db, now, &waiting, page).await?;
        let full_page = head.len() as u64 == page;
        let mut admitted = Vec::new();
        for row in head {
            if waiting.contains(&row.provider) {
                continue;
            }
            let removal = [states::REMOVING, states::FAILED].contains(&row.state.as_str());
            if removal && unreachable.contains(row.provider.as_str()) {
                continue;
            }
            if self
                .reconciler
                .in_flight
                .lock()
                .expect("not poisoned")
                .contains_key(&row.id)
            {
                continue;
            }
            let Some(permit) = throttle.slot() else {
                break;
            };
            let wait = match throttle.admit(&row.provider, row.attempts > 0) {
                Ok(()) => None,
                // This retry waits for first attempts to earn the provider's budget: the
                // provider's first attempts behind it go on (deferring the whole provider
                // would leave nothing to earn it, and the queue stuck), and wake the loop.
                Err(Wait::RetryBudget) => continue,
                Err(Wait::Rate(wait)) => Some(wait),
                Err(Wait::ProviderHold(until)) => {
                    Some(until.saturating_duration_since(Instant::now()))
                }
            };
            if let Some(wait) = wait {
                // This provider waits; others may go on.
                held_for = Some(held_for.map_or(wait, |held| held.min(wait)));
                waiting.insert(row.provider.clone());
                continue;
            }
            admitted.push((row, permit));
        }
        if admitted.is_empty() {
            return Ok((false, held_for));
        }
        let until = now
            + ChronoDuration::from_std(self.reconciler.settings.claim_ttl)
                .map_err(ApiError::internal)?;
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        let rows = admitted.iter().map(|(row, _)| row.clone()).collect();
        let claimed: HashSet<Uuid> =
            queue::claims_take(&txn, rows, &self.reconciler.runner, now, until)
                .await?
                .into_iter()
                .map(|row| row.id)
                .collect();
        txn.commit().await?;
        for (row, permit) in admitted {
            if !claimed.contains(&row.id) || !self.reconciler.op_begin(row.id, &row.provider) {
                continue;
            }
            let app = self.clone();
            tokio::spawn(async move {
                let id = row.id;
                let renewal = tokio::spawn(app.clone().instance_claim_renew(id));
                app.instance_operation(row).await;
                renewal.abort();
                app.reconciler.op_end(id);
                drop(permit);
                app.deployments_changed();
            });
        }
        let more = full_page && throttle.in_flight() < throttle.limit();
        Ok((more, held_for))
    }

    /// Releases the claims of every other runner, on becoming the deploys' leader: the
    /// operations a previous leader claimed are taken up at once, not when their claims
    /// lapse. Its lease ended, so whatever it may still do cannot be written (its writes check
    /// the lease), and provider operations are idempotent on the instance key; its claim
    /// renewals name it, so they no longer match.
    async fn claims_of_others_release(&self) -> ApiResult<u64> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        let released = claim_cleared(instance::Entity::update_many())
            .filter(instance::Column::ClaimedBy.is_not_null())
            .filter(instance::Column::ClaimedBy.ne(self.reconciler.runner.clone()))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok(released.rows_affected)
    }

    /// Keeps this runner's claim on instance `id` alive while its operation runs: a claim
    /// lasts only a few seconds, so that the instances of a runner that died are taken up
    /// again soon, and a live runner renews it well before it lapses.
    async fn instance_claim_renew(self, id: Uuid) {
        let ttl = self.reconciler.settings.claim_ttl;
        loop {
            tokio::time::sleep(ttl / 3).await;
            // A replica that lost the lead lets its claims lapse to the new leader.
            if !self.leases.leads(Work::Deploys) {
                return;
            }
            let until = Utc::now() + ChronoDuration::from_std(ttl).unwrap_or_default();
            let renewed = instance::Entity::update_many()
                .col_expr(instance::Column::ClaimedUntil, Expr::value(until))
                .filter(instance::Column::Id.eq(id))
                .filter(instance::Column::ClaimedBy.eq(self.reconciler.runner.clone()))
                .exec(&self.db)
                .await;
            if let Err(err) = renewed {
                self.reconciler
                    .error_record(format!("renewing the claim on instance {id}: {err}"));
            }
        }
    }
}

/// Why an instance takes over from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Takeover {
    /// The other's provider refused it.
    Failover,
    /// The other's provider is being evacuated.
    Evacuation,
    /// The other has been unhealthy for a while.
    Unhealthy,
}

/// Inserts a pending instance of `found` at `slot` (its key chosen now, before any provider
/// hears of it), taking over from `replaces` if given; records the placement.
pub(crate) async fn instance_insert(
    db: &impl ConnectionTrait,
    found: &deployment::Model,
    service_name: &str,
    slot: &Slot,
    takeover: Option<(&instance::Model, Takeover)>,
) -> ApiResult<instance::Model> {
    let replaces = takeover.map(|(old, _)| old);
    let now = Utc::now();
    let row = instance::ActiveModel {
        id: Set(Uuid::now_v7()),
        deployment_id: Set(found.id),
        service_id: Set(found.service_id),
        project_id: Set(found.project_id),
        instance_key: Set(instance_key_new(service_name, found.number)),
        provider: Set(slot.provider.clone()),
        region: Set(slot.region.clone()),
        address: Set(None),
        provider_id: Set(None),
        state: Set(states::PENDING.into()),
        health: Set(states::HEALTH_UNKNOWN.into()),
        health_checked_at: Set(None),
        health_streak: Set(0),
        attempts: Set(0),
        next_attempt_at: Set(None),
        last_error: Set(String::new()),
        replaces: Set(replaces.map(|r| r.id)),
        claimed_by: Set(None),
        claimed_until: Set(None),
        dispatch_order: Set(queue::dispatch_order_next(db, found.project_id).await?),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await?;
    let (kind, message) = match takeover {
        Some((old, Takeover::Failover)) => (
            DeploymentEventKind::InstanceFailover,
            format!(
                "{} failed over from {} ({}) to {} in {}",
                row.instance_key, old.provider, old.last_error, slot.provider, slot.region
            ),
        ),
        Some((old, Takeover::Unhealthy)) => (
            DeploymentEventKind::InstanceReplacement,
            format!(
                "{} replaces {} on {} (unhealthy since {}) on {} in {}",
                row.instance_key,
                old.instance_key,
                old.provider,
                old.health_checked_at
                    .map_or_else(|| "a while".to_owned(), |at| at.to_rfc3339()),
                slot.provider,
                slot.region
            ),
        ),
        Some((old, Takeover::Evacuation)) => (
            DeploymentEventKind::InstanceReplacement,
            format!(
                "{} replaces {} (evacuating {}) on {} in {}",
                row.instance_key, old.instance_key, old.provider, slot.provider, slot.region
            ),
        ),
        None => (
            DeploymentEventKind::InstancePlaced,
            format!(
                "{} placed on {} in {}",
                row.instance_key, slot.provider, slot.region
            ),
        ),
    };
    event_append(
        db,
        found.id,
        kind,
        message,
        serde_json::json!({
            "instance_key": row.instance_key,
            "provider": slot.provider,
            "region": slot.region,
            "from_provider": replaces.map(|r| r.provider.clone()),
            "replaces": replaces.map(|r| r.instance_key.clone()),
        }),
    )
    .await?;
    Ok(row)
}

/// Places one instance of `owner` to take over from the instance of `takeover` (among
/// `candidates`, with `placed` instances of the deployment on each provider already), or, when
/// none can take it now, records why in an `instance.waiting` event that starts with `waiting`.
pub(crate) async fn replacement_place(
    db: &impl ConnectionTrait,
    owner: &deployment::Model,
    takeover: (&instance::Model, Takeover),
    candidates: &[Candidate],
    placed: &BTreeMap<String, u32>,
    waiting: &str,
) -> ApiResult<()> {
    let spec: ServiceSpec =
        serde_json::from_value(owner.spec.clone()).map_err(ApiError::internal)?;
    let service_name = service::Entity::find_by_id(owner.service_id)
        .one(db)
        .await?
        .map(|s| s.name)
        .unwrap_or_else(|| "service".into());
    match place(&spec.placement, &spec.regions, candidates, placed, 1) {
        Ok(slots) => {
            instance_insert(db, owner, &service_name, &slots[0], Some(takeover)).await?;
        }
        Err(why) => {
            let old = takeover.0;
            event_append(
                db,
                owner.id,
                DeploymentEventKind::InstanceWaiting,
                format!("{waiting}: {why}"),
                serde_json::json!({ "instance_key": old.instance_key, "provider": old.provider }),
            )
            .await?;
        }
    }
    Ok(())
}

/// `update` with the instances' claims cleared (no runner, no expiry).
pub(crate) fn claim_cleared(
    update: sea_orm::UpdateMany<instance::Entity>,
) -> sea_orm::UpdateMany<instance::Entity> {
    update
        .col_expr(
            instance::Column::ClaimedBy,
            Expr::value(Option::<String>::None),
        )
        .col_expr(
            instance::Column::ClaimedUntil,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
}

/// Moves `row` from state `from` to `to` (changing more with `change`), if it is still in
/// `from`; false if it moved on meanwhile (a cancel, another runner). Clears its claim.
pub(crate) async fn instance_transition(
    db: &impl ConnectionTrait,
    row: &instance::Model,
    from: &str,
    to: &str,
    change: impl FnOnce(sea_orm::UpdateMany<instance::Entity>) -> sea_orm::UpdateMany<instance::Entity>,
) -> ApiResult<bool> {
    let update = claim_cleared(instance::Entity::update_many())
        .col_expr(instance::Column::State, Expr::value(to))
        .col_expr(instance::Column::UpdatedAt, Expr::value(Utc::now()));
    let moved = change(update)
        .filter(instance::Column::Id.eq(row.id))
        .filter(instance::Column::State.eq(from))
        .exec(db)
        .await?;
    Ok(moved.rows_affected == 1)
}

/// How long operations of one kind took, for `/metrics`.
pub(crate) fn operation_record(
    provider: &str,
    operation: &'static str,
    outcome: &'static str,
    started: Instant,
) {
    metrics::counter!("deploy_operations_total", "provider" => provider.to_owned(), "operation" => operation, "outcome" => outcome).increment(1);
    metrics::histogram!("deploy_operation_duration_seconds", "provider" => provider.to_owned(), "operation" => operation)
        .record(started.elapsed().as_secs_f64());
}
