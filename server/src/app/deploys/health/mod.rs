//! The control plane's own checks of deployed workloads (see [`crate::app::deploys::health::probe`]): a loop
//! that probes each starting or running instance at its service's interval and acts on the
//! thresholds.
//!
//! - A `starting` instance that passes `healthy_threshold` checks in a row is `running` and
//!   healthy: it joins the routes, and the instance it replaces (failover, evacuation) drains.
//!   One that does not within `start_timeout_secs` fails, and so does its deployment's rollout
//!   (the previous version keeps serving).
//! - A `running` instance that fails `unhealthy_threshold` checks in a row is unhealthy and
//!   leaves the routes; it rejoins after `healthy_threshold` passes.
//!
//! Checks are spread over their interval and due times are kept in a heap
//! ([`crate::app::deploys::health::schedule`]); a pass costs the checks due, not the instances checked.
//! Checks due together run as one batch, in one task, at most one batch every [`BATCH_GAP`]:
//! at thousands of checks a second, waking threads for each check cost more than the checks.
//! The instances to check are read again every 10 s, and their starting ones soon after a
//! deployment changes. Streaks are kept in memory and written only when the health changes;
//! the changes that a round of results brings are written in one transaction (a restart
//! starts the streaks afresh, from the stored health).
//!
//! Where a provider checks workloads near them ([`crate::app::deploys::health::reports`]: the metal plugin's
//! host agents), its reports stand for the checks of the instances they name, and act through
//! the same verdicts; the control plane checks only what no provider reports.

pub mod probe;
pub mod reports;
pub mod schedule;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::deployments::deployment_finish;
use crate::app::deploys::events::{DeploymentEventKind, event_append};
use crate::app::deploys::health::probe::probe;
use crate::app::deploys::health::reports::HealthReport;
use crate::app::deploys::health::schedule::{HealthSchedule, Scheduled, Verdict};
use crate::app::deploys::instances::instance_transition;
use crate::app::deploys::rollouts::deployment_settle;
use crate::app::projects::services::spec::HealthCheckSpec;
use crate::app::projects::services::spec::ServiceSpec;
use crate::entity::deployment::DeploymentState;
use crate::entity::instance::{InstanceHealth, InstanceState};
use crate::entity::{deployment, instance};
use crate::error::{AppError, AppResult};
use crate::ids::DeploymentId;
use crate::ids::InstanceId;

/// How often every instance to check is read again (new, gone, changed).
const SYNC_EVERY: Duration = Duration::from_secs(10);
/// How soon after a deployment changes its starting instances are read.
const STARTING_SYNC_AFTER: Duration = Duration::from_millis(200);
/// Checks in flight at once.
const CONCURRENT_CHECKS: usize = 256;
/// The least time between two batches of checks. Checks due meanwhile wait for the next
/// batch (at most this long), so that a thousand checks a second are a few dozen wake-ups of
/// the loop and tasks spawned, not a thousand, and their connections' events come to the
/// runtime together.
const BATCH_GAP: Duration = Duration::from_millis(25);
/// How long the loop sleeps when it does not lead or has nothing to check.
const IDLE: Duration = Duration::from_secs(1);

/// The loop's state between passes.
struct HealthLoop {
    schedule: HealthSchedule,
    /// Deployments' health checks, decoded once (a deployment's spec never changes).
    specs: HashMap<DeploymentId, Arc<HealthCheckSpec>>,
    next_sync: Instant,
    /// A deployment changed: its starting instances are read at this time.
    starting_sync: Option<Instant>,
    /// No checks are taken before this (see [`BATCH_GAP`]).
    next_batch: Instant,
}

/// Runs a batch of checks in one task, each holding a permit while it runs;
/// results go back as they come, those ready together in one message.
fn checks_run(
    due: Vec<(InstanceId, String, Arc<HealthCheckSpec>)>,
    permits: &Arc<Semaphore>,
    results_tx: &mpsc::Sender<Vec<(InstanceId, bool)>>,
) {
    // Only the health loop takes permits, and it takes no more checks than are free.
    let checks: FuturesUnordered<_> = due
        .into_iter()
        .map(|(id, address, spec)| {
            let permit = permits.clone().try_acquire_owned();
            async move {
                let passed = probe(&address, &spec).await;
                drop(permit);
                (id, passed)
            }
        })
        .collect();
    let results_tx = results_tx.clone();
    tokio::spawn(async move {
        let mut checks = checks;
        while let Some(first) = checks.next().await {
            let mut ready = vec![first];
            while let Some(Some(more)) = checks.next().now_or_never() {
                ready.push(more);
            }
            if results_tx.send(ready).await.is_err() {
                return;
            }
        }
    });
}

/// The verdicts that call for action, with what they apply to (most results change nothing,
/// and are not copied).
fn acted_on((entry, verdict): (&Scheduled, Verdict)) -> Option<(Scheduled, Verdict)> {
    (verdict != Verdict::Same).then(|| (entry.clone(), verdict))
}

impl App {
    /// The health checks of deployed instances, until `stop` turns true: the checks' event
    /// loop and the reports of the providers that check near the workload, in one future (a
    /// panic in either ends both, and the task starts them again).
    pub async fn instance_health_run(&self, stop: watch::Receiver<bool>) {
        let (reports_tx, reports) = mpsc::channel::<HealthReport>(16);
        tokio::join!(
            self.health_reports_run(stop.clone(), reports_tx),
            self.health_checks_run(stop, reports),
        );
    }

    /// The health checks' event loop, until `stop` turns true.
    async fn health_checks_run(
        &self,
        mut stop: watch::Receiver<bool>,
        mut reports: mpsc::Receiver<HealthReport>,
    ) {
        let permits = Arc::new(Semaphore::new(CONCURRENT_CHECKS));
        let (results_tx, mut results) = mpsc::channel::<Vec<(InstanceId, bool)>>(CONCURRENT_CHECKS);
        let mut deployments = self.changes.deployments.subscribe();
        let mut state = HealthLoop {
            schedule: HealthSchedule::default(),
            specs: HashMap::new(),
            next_sync: Instant::now(),
            starting_sync: None,
            next_batch: Instant::now(),
        };
        let (mut arrived, mut done) = (Vec::new(), Vec::new());
        loop {
            let now = Instant::now();
            let leads = self.leases.leads(Work::InstanceHealth);
            if !leads {
                state.schedule.clear();
                state.next_sync = now;
                state.starting_sync = None;
            } else if let Err(err) = self.instance_health_sync(&mut state, now).await {
                self.reconciler
                    .error_record(format!("health checks: {err}"));
                state.next_sync = now + IDLE;
            }
            let now = Instant::now();
            if leads && now >= state.next_batch {
                let due = state.schedule.take_due(now, permits.available_permits());
                if !due.is_empty() {
                    state.next_batch = now + BATCH_GAP;
                    checks_run(due, &permits, &results_tx);
                }
            }
            let wake = [
                Some(state.next_sync),
                state.starting_sync,
                state
                    .schedule
                    .next_due()
                    .map(|due| due.max(state.next_batch)),
                Some(Instant::now() + IDLE),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or_else(|| Instant::now() + IDLE);
            tokio::select! {
                _ = stop.changed() => {
                    if *stop.borrow() {
                        return;
                    }
                }
                Ok(()) = deployments.changed() => {
                    state.starting_sync.get_or_insert(Instant::now() + STARTING_SYNC_AFTER);
                }
                received = results.recv_many(&mut arrived, CONCURRENT_CHECKS) => {
                    if received > 0 {
                        done.extend(arrived.drain(..).flatten());
                        let (now, wall) = (Instant::now(), Utc::now());
                        let verdicts = done
                            .drain(..)
                            .filter_map(|(id, passed)| {
                                state.schedule.record(id, passed, now, wall).and_then(acted_on)
                            })
                            .collect();
                        self.instance_health_act(&mut state.schedule, verdicts).await;
                    }
                }
                Some(report) = reports.recv() => {
                    let (now, wall) = (Instant::now(), Utc::now());
                    // A starting instance its provider says failed (its code not fetched or
                    // built, its command not started) fails now, with the provider's reason.
                    let mut failed = Vec::new();
                    let verdicts = report
                        .into_iter()
                        .filter_map(|reported| {
                            if let Some(reason) = reported.failed
                                && let Some(row) = state.schedule.starting(&reported.key)
                            {
                                failed.push((row.clone(), reason));
                                return None;
                            }
                            state
                                .schedule
                                .report(&reported.key, reported.health, now, wall)
                                .and_then(acted_on)
                        })
                        .collect();
                    self.instance_health_act(&mut state.schedule, verdicts).await;
                    for (row, reason) in failed {
                        let message = format!("{} failed to start: {reason}", row.instance_key);
                        match self.instance_start_failed(&row, message, "start_failed").await {
                            Ok(()) => state.schedule.remove(row.id),
                            Err(err) => self
                                .reconciler
                                .error_record(format!("health of {}: {err}", row.instance_key)),
                        }
                    }
                }
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// Reads the instances to check when it is time: all of them every [`SYNC_EVERY`], the
    /// starting ones after a deployment changed.
    async fn instance_health_sync(&self, state: &mut HealthLoop, now: Instant) -> AppResult<()> {
        let complete = now >= state.next_sync;
        let starting = state.starting_sync.is_some_and(|at| now >= at);
        if !complete && !starting {
            return Ok(());
        }
        let mut query = instance::Entity::find().filter(instance::Column::Address.is_not_null());
        query = if complete {
            query.filter(
                instance::Column::State.is_in([InstanceState::Starting, InstanceState::Running]),
            )
        } else {
            query.filter(instance::Column::State.eq(InstanceState::Starting))
        };
        state.starting_sync = None;
        let rows = query.all(&self.db).await?;
        let missing: Vec<DeploymentId> = rows
            .iter()
            .map(|row| row.deployment_id)
            .filter(|id| !state.specs.contains_key(id))
            .collect::<std::collections::HashSet<_>>()
            .into_iter()
            .collect();
        for chunk in missing.chunks(500) {
            for found in deployment::Entity::find()
                .filter(deployment::Column::Id.is_in(chunk.iter().copied()))
                .all(&self.db)
                .await?
            {
                let spec: ServiceSpec =
                    serde_json::from_value(found.spec).map_err(AppError::internal)?;
                state.specs.insert(found.id, Arc::new(spec.health_check));
            }
        }
        if complete {
            let live: std::collections::HashSet<DeploymentId> =
                rows.iter().map(|row| row.deployment_id).collect();
            state.specs.retain(|id, _| live.contains(id));
            state.next_sync = now + SYNC_EVERY;
        }
        let specs = &state.specs;
        let rows = rows.into_iter().filter_map(|row| {
            let spec = specs.get(&row.deployment_id)?.clone();
            Some((row, spec))
        });
        state.schedule.sync(rows, complete, now);
        Ok(())
    }

    /// Acts on the verdicts of a round of results (or of a provider's report): first healths
    /// and failed starts one by one (each ends a step of a rollout), changes of health of
    /// running instances together.
    async fn instance_health_act(
        &self,
        schedule: &mut HealthSchedule,
        verdicts: Vec<(Scheduled, Verdict)>,
    ) {
        let mut flips = Vec::new();
        let mut steps = Vec::new();
        for (entry, verdict) in verdicts {
            match verdict {
                Verdict::Same => {}
                Verdict::Flip(health) => flips.push((entry.row, health, entry.streak)),
                Verdict::FirstHealthy | Verdict::NeverHealthy => {
                    steps.push((entry.row, entry.spec, entry.streak, verdict))
                }
            }
        }
        for (row, spec, streak, verdict) in steps {
            let result = if verdict == Verdict::FirstHealthy {
                self.instance_healthy_first(&row, streak).await
            } else {
                self.instance_never_healthy(&row, &spec).await
            };
            match result {
                Ok(()) if verdict == Verdict::FirstHealthy => {
                    schedule.row_update(row.id, InstanceState::Running, InstanceHealth::Healthy)
                }
                Ok(()) => schedule.remove(row.id),
                Err(err) => self
                    .reconciler
                    .error_record(format!("health of {}: {err}", row.instance_key)),
            }
        }
        if flips.is_empty() {
            return;
        }
        match self.instance_health_flips(&flips).await {
            Ok(()) => {
                for (row, health, _) in &flips {
                    schedule.row_update(row.id, InstanceState::Running, *health);
                }
            }
            Err(err) => self
                .reconciler
                .error_record(format!("health of {} instance(s): {err}", flips.len())),
        }
    }

    /// A starting instance passed its checks: it runs, serves, and the one it replaces drains.
    async fn instance_healthy_first(&self, row: &instance::Model, streak: i32) -> AppResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::InstanceHealth).await?;
        let now = Utc::now();
        let moved = instance_transition(
            &txn,
            row,
            InstanceState::Starting,
            InstanceState::Running,
            |u| {
                u.col_expr(
                    instance::Column::Health,
                    Expr::value(InstanceHealth::Healthy),
                )
                .col_expr(instance::Column::HealthStreak, Expr::value(streak))
                .col_expr(instance::Column::HealthCheckedAt, Expr::value(Some(now)))
            },
        )
        .await?;
        if !moved {
            return Ok(());
        }
        event_append(
            &txn,
            row.deployment_id,
            DeploymentEventKind::InstanceHealthy,
            format!("{} is healthy at {}", row.instance_key, row.address.as_deref().unwrap_or_default()),
            serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider, "address": row.address }),
        )
        .await?;
        if let Some(replaced) = row.replaces
            && let Some(old) = instance::Entity::find_by_id(replaced).one(&txn).await?
            && instance_transition(
                &txn,
                &old,
                InstanceState::Running,
                InstanceState::Draining,
                |u| u,
            )
            .await?
        {
            let message = format!(
                "{} on {} drains: {} replaces it",
                old.instance_key, old.provider, row.instance_key
            );
            let details = serde_json::json!({
                "instance_key": old.instance_key,
                "provider": old.provider,
                "replaced_by": row.instance_key,
            });
            event_append(
                &txn,
                old.deployment_id,
                DeploymentEventKind::InstanceDraining,
                message,
                details,
            )
            .await?;
        }
        // Its rollout ends with its last instance.
        deployment_settle(&txn, row.deployment_id).await?;
        txn.commit().await?;
        self.changes.routes_changed([row.service_id]);
        self.deployments_changed();
        Ok(())
    }

    /// A starting instance did not become healthy in time: it fails, and so does the rollout
    /// it belongs to (whose new instances are removed; the previous version keeps serving).
    async fn instance_never_healthy(
        &self,
        row: &instance::Model,
        spec: &HealthCheckSpec,
    ) -> AppResult<()> {
        let message = format!(
            "{} did not pass its health check (GET {}) within {} s",
            row.instance_key, spec.path, spec.start_timeout_secs
        );
        self.instance_start_failed(row, message, "never_healthy")
            .await
    }

    /// A starting instance failed (`error` says how, `message` to people): it fails, and so
    /// does the rollout it belongs to (whose new instances are removed; the previous version
    /// keeps serving).
    async fn instance_start_failed(
        &self,
        row: &instance::Model,
        message: String,
        error: &str,
    ) -> AppResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::InstanceHealth).await?;
        let moved = instance_transition(
            &txn,
            row,
            InstanceState::Starting,
            InstanceState::Failed,
            |u| {
                u.col_expr(
                    instance::Column::Health,
                    Expr::value(InstanceHealth::Unhealthy),
                )
                .col_expr(
                    instance::Column::LastError,
                    Expr::value(error.replace('_', " ")),
                )
                .col_expr(instance::Column::Attempts, Expr::value(0))
            },
        )
        .await?;
        if !moved {
            return Ok(());
        }
        event_append(
            &txn,
            row.deployment_id,
            DeploymentEventKind::InstanceFailed,
            message.clone(),
            serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider, "error": error }),
        )
        .await?;
        if let Some(found) = deployment::Entity::find_by_id(row.deployment_id)
            .one(&txn)
            .await?
            && DeploymentState::IN_PROGRESS.contains(&found.state)
        {
            deployment_finish(
                &txn,
                &found,
                DeploymentState::Failed,
                format!("{message}; the previous version keeps serving"),
            )
            .await?;
        }
        txn.commit().await?;
        // The failed rollout's other instances are removed, routed ones included.
        self.changes.routes_changed([row.service_id]);
        self.deployments_changed();
        Ok(())
    }

    /// Records the health (and streak) of running instances, in one transaction, and wakes
    /// the routing table for their services.
    pub async fn instance_health_flips(
        &self,
        flips: &[(instance::Model, InstanceHealth, i32)],
    ) -> AppResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::InstanceHealth).await?;
        let now = Utc::now();
        let mut settled = false;
        for (row, health, streak) in flips {
            let changed = instance::Entity::update_many()
                .col_expr(instance::Column::Health, Expr::value(*health))
                .col_expr(instance::Column::HealthStreak, Expr::value(*streak))
                .col_expr(instance::Column::HealthCheckedAt, Expr::value(Some(now)))
                .col_expr(instance::Column::UpdatedAt, Expr::value(now))
                .filter(instance::Column::Id.eq(row.id))
                .filter(instance::Column::State.eq(InstanceState::Running))
                .filter(instance::Column::Health.ne(*health))
                .exec(&txn)
                .await?;
            if changed.rows_affected != 1 {
                continue;
            }
            event_append(
                &txn,
                row.deployment_id,
                if *health == InstanceHealth::Healthy {
                    DeploymentEventKind::InstanceHealthy
                } else {
                    DeploymentEventKind::InstanceUnhealthy
                },
                format!("{} is {health} ({} check(s) in a row)", row.instance_key, streak.abs()),
                serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider, "health": health }),
            )
            .await?;
            if *health == InstanceHealth::Healthy {
                settled |= deployment_settle(&txn, row.deployment_id).await?.is_some();
            }
        }
        txn.commit().await?;
        self.changes
            .routes_changed(flips.iter().map(|(row, _, _)| row.service_id));
        if settled {
            self.deployments_changed();
        }
        Ok(())
    }
}
