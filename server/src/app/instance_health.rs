//! The control plane's own checks of deployed workloads (see [`super::health_checks`]): a loop
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
//! Streaks are kept in memory and written only when the health changes (checks are frequent;
//! a restart starts the streaks afresh, from the stored health).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::Utc;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use tokio::sync::watch;
use uuid::Uuid;

use super::App;
use super::deployment_events::event_append;
use super::deployments::{self, deployment_finish};
use super::health_checks::{HealthCheckSpec, probe};
use super::instances as states;
use super::leases::Work;
use super::reconciler::instance_transition;
use super::rollouts::deployment_settle;
use super::services::ServiceSpec;
use crate::entity::{deployment, instance};
use crate::error::{ApiError, ApiResult};

/// How often the loop looks for due checks.
const TICK: Duration = Duration::from_millis(100);
/// Checks run at once.
const CONCURRENT_CHECKS: usize = 64;

/// Consecutive results of each instance's checks in this server.
#[derive(Default)]
pub struct HealthStreaks {
    streaks: Mutex<HashMap<Uuid, (Instant, i32)>>,
}

impl HealthStreaks {
    fn due(&self, id: Uuid, interval: Duration, now: Instant) -> bool {
        self.streaks
            .lock()
            .expect("not poisoned")
            .get(&id)
            .is_none_or(|(at, _)| now.duration_since(*at) >= interval)
    }

    /// Records a result; returns the streak (positive: passes in a row, negative: failures).
    fn record(&self, id: Uuid, passed: bool) -> i32 {
        let mut streaks = self.streaks.lock().expect("not poisoned");
        let entry = streaks.entry(id).or_insert((Instant::now(), 0));
        entry.0 = Instant::now();
        entry.1 = match (passed, entry.1) {
            (true, n) if n > 0 => n.saturating_add(1),
            (true, _) => 1,
            (false, n) if n < 0 => n.saturating_sub(1),
            (false, _) => -1,
        };
        entry.1
    }

    fn forget_except(&self, live: &[Uuid]) {
        self.streaks
            .lock()
            .expect("not poisoned")
            .retain(|id, _| live.contains(id));
    }
}

impl App {
    /// The health-check loop, until the server stops.
    pub async fn instance_health_run(self, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    if *stop.borrow() {
                        return;
                    }
                }
                _ = tick.tick() => {}
            }
            if !self.leases.leads(Work::InstanceHealth) {
                continue;
            }
            if let Err(err) = self.instance_health_pass().await {
                self.reconciler
                    .error_record(format!("health checks: {}", err.detail));
            }
        }
    }

    /// Checks every instance whose check is due, and acts on the results.
    pub async fn instance_health_pass(&self) -> ApiResult<()> {
        let rows = instance::Entity::find()
            .filter(instance::Column::State.is_in([states::STARTING, states::RUNNING]))
            .filter(instance::Column::Address.is_not_null())
            .all(&self.db)
            .await?;
        self.health_streaks
            .forget_except(&rows.iter().map(|r| r.id).collect::<Vec<_>>());
        if rows.is_empty() {
            return Ok(());
        }
        let mut specs: HashMap<Uuid, HealthCheckSpec> = HashMap::new();
        let deployment_ids: Vec<Uuid> = rows.iter().map(|r| r.deployment_id).collect();
        for found in deployment::Entity::find()
            .filter(deployment::Column::Id.is_in(deployment_ids))
            .all(&self.db)
            .await?
        {
            let spec: ServiceSpec =
                serde_json::from_value(found.spec).map_err(ApiError::internal)?;
            specs.insert(found.id, spec.health_check);
        }
        let now = Instant::now();
        let due: Vec<(instance::Model, HealthCheckSpec)> = rows
            .into_iter()
            .filter_map(|row| {
                let spec = specs.get(&row.deployment_id)?.clone();
                self.health_streaks
                    .due(row.id, spec.interval(), now)
                    .then_some((row, spec))
            })
            .collect();
        for batch in due.chunks(CONCURRENT_CHECKS) {
            let results =
                futures_util::future::join_all(batch.iter().map(|(row, spec)| async move {
                    let address = row.address.as_deref().unwrap_or_default();
                    (probe(address, spec).await, row, spec)
                }))
                .await;
            for (passed, row, spec) in results {
                let streak = self.health_streaks.record(row.id, passed);
                if let Err(err) = self.instance_health_apply(row, spec, streak).await {
                    self.reconciler
                        .error_record(format!("health of {}: {}", row.instance_key, err.detail));
                }
            }
        }
        Ok(())
    }

    async fn instance_health_apply(
        &self,
        row: &instance::Model,
        spec: &HealthCheckSpec,
        streak: i32,
    ) -> ApiResult<()> {
        let healthy_enough = streak >= spec.healthy_threshold as i32;
        let unhealthy_enough = streak <= -(spec.unhealthy_threshold as i32);
        match row.state.as_str() {
            states::STARTING if healthy_enough => self.instance_healthy_first(row, streak).await,
            states::STARTING => {
                let started = Utc::now() - row.updated_at;
                if started.num_seconds() >= i64::from(spec.start_timeout_secs) {
                    self.instance_never_healthy(row, spec).await
                } else {
                    Ok(())
                }
            }
            states::RUNNING if healthy_enough && row.health != states::HEALTH_HEALTHY => {
                self.instance_health_set(row, states::HEALTH_HEALTHY, streak)
                    .await
            }
            states::RUNNING if unhealthy_enough && row.health != states::HEALTH_UNHEALTHY => {
                self.instance_health_set(row, states::HEALTH_UNHEALTHY, streak)
                    .await
            }
            _ => Ok(()),
        }
    }

    /// A starting instance passed its checks: it runs, serves, and the one it replaces drains.
    async fn instance_healthy_first(&self, row: &instance::Model, streak: i32) -> ApiResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::InstanceHealth).await?;
        let now = Utc::now();
        let moved = instance_transition(&txn, row, states::STARTING, states::RUNNING, |u| {
            u.col_expr(
                instance::Column::Health,
                Expr::value(states::HEALTH_HEALTHY),
            )
            .col_expr(instance::Column::HealthStreak, Expr::value(streak))
            .col_expr(instance::Column::HealthCheckedAt, Expr::value(Some(now)))
        })
        .await?;
        if !moved {
            return Ok(());
        }
        event_append(
            &txn,
            row.deployment_id,
            "instance.healthy",
            format!("{} is healthy at {}", row.instance_key, row.address.as_deref().unwrap_or_default()),
            serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider, "address": row.address }),
        )
        .await?;
        if let Some(replaced) = row.replaces
            && let Some(old) = instance::Entity::find_by_id(replaced).one(&txn).await?
            && instance_transition(&txn, &old, states::RUNNING, states::DRAINING, |u| u).await?
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
                "instance.draining",
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
    ) -> ApiResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::InstanceHealth).await?;
        let moved = instance_transition(&txn, row, states::STARTING, states::FAILED, |u| {
            u.col_expr(
                instance::Column::Health,
                Expr::value(states::HEALTH_UNHEALTHY),
            )
            .col_expr(instance::Column::LastError, Expr::value("never healthy"))
            .col_expr(instance::Column::Attempts, Expr::value(0))
        })
        .await?;
        if !moved {
            return Ok(());
        }
        let message = format!(
            "{} did not pass its health check (GET {}) within {} s",
            row.instance_key, spec.path, spec.start_timeout_secs
        );
        event_append(
            &txn,
            row.deployment_id,
            "instance.failed",
            message.clone(),
            serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider, "error": "never_healthy" }),
        )
        .await?;
        if let Some(found) = deployment::Entity::find_by_id(row.deployment_id)
            .one(&txn)
            .await?
            && deployments::IN_PROGRESS.contains(&found.state.as_str())
        {
            deployment_finish(
                &txn,
                &found,
                deployments::FAILED,
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

    /// Records `health` (and the streak) of a running instance and wakes the routing table.
    pub async fn instance_health_set(
        &self,
        row: &instance::Model,
        health: &str,
        streak: i32,
    ) -> ApiResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::InstanceHealth).await?;
        let changed = instance::Entity::update_many()
            .col_expr(instance::Column::Health, Expr::value(health))
            .col_expr(instance::Column::HealthStreak, Expr::value(streak))
            .col_expr(
                instance::Column::HealthCheckedAt,
                Expr::value(Some(Utc::now())),
            )
            .col_expr(instance::Column::UpdatedAt, Expr::value(Utc::now()))
            .filter(instance::Column::Id.eq(row.id))
            .filter(instance::Column::State.eq(states::RUNNING))
            .exec(&txn)
            .await?;
        let mut settled = None;
        if changed.rows_affected == 1 {
            event_append(
                &txn,
                row.deployment_id,
                &format!("instance.{health}"),
                format!("{} is {health} ({} check(s) in a row)", row.instance_key, streak.abs()),
                serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider, "health": health }),
            )
            .await?;
            if health == states::HEALTH_HEALTHY {
                settled = deployment_settle(&txn, row.deployment_id).await?;
            }
        }
        txn.commit().await?;
        self.changes.routes_changed([row.service_id]);
        if settled.is_some() {
            self.deployments_changed();
        }
        Ok(())
    }
}
