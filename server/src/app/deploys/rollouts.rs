//! Rollouts that end well: a rolling-out deployment whose instances are all made, `running`
//! and healthy becomes `healthy`; the deployment it replaces is superseded and its instances
//! drain (make before break).
//!
//! It happens in the transaction that makes the last instance healthy (the health checks, and
//! placement when nothing is left to make), so that a rollout ends when its last instance
//! passes, and no pass reads every rolling-out deployment to find the few that are done. A
//! sweep of the reconciler every [`SETTLE_SWEEP_EVERY`] settles those that a crash between two
//! steps left behind. Callers fence the transaction with their own lease.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::events::{DeploymentEventKind, event_append};
use crate::app::projects::services::spec::ServiceSpec;
use crate::entity::deployment::DeploymentState;
use crate::entity::instance::{InstanceHealth, InstanceState};
use crate::entity::{deployment, instance};
use crate::error::{AppError, AppResult};
use crate::ids::{DeploymentId, ServiceId};

/// How often the reconciler looks at every rolling-out deployment, for one that should have
/// settled.
pub const SETTLE_SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Deployments whose instances one query of the sweep counts.
const SWEEP_CHUNK: usize = 500;

/// A deployment that settled: whose routes changed.
pub struct Settled {
    pub service_id: ServiceId,
}

/// Settles deployment `id` within `txn` if it is rolling out and every instance it needs is
/// made, running and healthy; answers what settled.
pub async fn deployment_settle(
    txn: &impl ConnectionTrait,
    id: DeploymentId,
) -> AppResult<Option<Settled>> {
    let Some(found) = deployment::Entity::find_by_id(id)
        .filter(deployment::Column::State.eq(DeploymentState::RollingOut))
        .one(txn)
        .await?
    else {
        return Ok(None);
    };
    let spec: ServiceSpec =
        serde_json::from_value(found.spec.clone()).map_err(AppError::internal)?;
    let instances = instance::Entity::find()
        .filter(instance::Column::DeploymentId.eq(found.id))
        .all(txn)
        .await?;
    let states = instances.iter().map(|i| (i.state, i.health, 1i64));
    if !rollout_done(spec.replicas, states) {
        return Ok(None);
    }
    let now = Utc::now();
    let changed = deployment::Entity::update_many()
        .col_expr(
            deployment::Column::State,
            Expr::value(DeploymentState::Healthy),
        )
        .col_expr(deployment::Column::Reason, Expr::value(""))
        .col_expr(deployment::Column::HealthyAt, Expr::value(now))
        .col_expr(deployment::Column::FinishedAt, Expr::value(now))
        .col_expr(deployment::Column::UpdatedAt, Expr::value(now))
        .col_expr(
            deployment::Column::Revision,
            Expr::col(deployment::Column::Revision).add(1),
        )
        .filter(deployment::Column::Id.eq(found.id))
        .filter(deployment::Column::State.eq(DeploymentState::RollingOut))
        .exec(txn)
        .await?;
    if changed.rows_affected != 1 {
        return Ok(None);
    }
    event_append(
        txn,
        found.id,
        DeploymentEventKind::DeploymentHealthy,
        format!(
            "deployment #{} is healthy: {} instance(s) serving",
            found.number, spec.replicas
        ),
        serde_json::json!({ "replicas": spec.replicas }),
    )
    .await?;
    // The deployments it replaces: their instances leave the routes, then are removed.
    let older = deployment::Entity::find()
        .filter(deployment::Column::ServiceId.eq(found.service_id))
        .filter(deployment::Column::Id.ne(found.id))
        .filter(deployment::Column::State.eq(DeploymentState::Healthy))
        .all(txn)
        .await?;
    for old in older {
        deployment::Entity::update_many()
            .col_expr(
                deployment::Column::State,
                Expr::value(DeploymentState::Superseded),
            )
            .col_expr(
                deployment::Column::Reason,
                Expr::value(format!("replaced by deployment #{}", found.number)),
            )
            .col_expr(deployment::Column::UpdatedAt, Expr::value(now))
            .col_expr(
                deployment::Column::Revision,
                Expr::col(deployment::Column::Revision).add(1),
            )
            .filter(deployment::Column::Id.eq(old.id))
            .exec(txn)
            .await?;
        let draining = instance::Entity::update_many()
            .col_expr(
                instance::Column::State,
                Expr::value(InstanceState::Draining),
            )
            .col_expr(instance::Column::UpdatedAt, Expr::value(now))
            .filter(instance::Column::DeploymentId.eq(old.id))
            .filter(instance::Column::State.is_in(InstanceState::ACTIVE))
            .exec(txn)
            .await?
            .rows_affected;
        event_append(
            txn,
            old.id,
            DeploymentEventKind::DeploymentSuperseded,
            format!(
                "replaced by deployment #{}: draining {draining} instance(s)",
                found.number
            ),
            serde_json::json!({ "by": found.number, "draining": draining }),
        )
        .await?;
    }
    Ok(Some(Settled {
        service_id: found.service_id,
    }))
}

/// Whether a rollout of `replicas` is done, given how many of its instances are in each
/// (state, health): none is still being made, and `replicas` of them serve.
fn rollout_done(
    replicas: u32,
    instances: impl IntoIterator<Item = (InstanceState, InstanceHealth, i64)>,
) -> bool {
    let mut serving = 0;
    for (state, health, count) in instances {
        if [
            InstanceState::Pending,
            InstanceState::Provisioning,
            InstanceState::Starting,
        ]
        .contains(&state)
        {
            return false;
        }
        if state == InstanceState::Running && health == InstanceHealth::Healthy {
            serving += count;
        }
    }
    serving >= i64::from(replicas)
}

impl App {
    /// Tells this server and the others what a settled rollout changed (after the commit).
    pub(crate) fn settled_notify(&self, settled: &Settled) {
        self.deployments_changed();
        self.changes.routes_changed([settled.service_id]);
    }

    /// Settles every rolling-out deployment that is done (the reconciler's sweep): read in
    /// bulk, then a write for each one found done.
    pub(crate) async fn deployments_settle_sweep(&self) -> AppResult<()> {
        let rolling: Vec<(DeploymentId, serde_json::Value)> = deployment::Entity::find()
            .select_only()
            .column(deployment::Column::Id)
            .column(deployment::Column::Spec)
            .filter(deployment::Column::State.eq(DeploymentState::RollingOut))
            .into_tuple()
            .all(&self.db)
            .await?;
        for chunk in rolling.chunks(SWEEP_CHUNK) {
            let counts: Vec<(DeploymentId, InstanceState, InstanceHealth, i64)> =
                instance::Entity::find()
                    .select_only()
                    .column(instance::Column::DeploymentId)
                    .column(instance::Column::State)
                    .column(instance::Column::Health)
                    .column_as(instance::Column::Id.count(), "count")
                    .filter(instance::Column::DeploymentId.is_in(chunk.iter().map(|(id, _)| *id)))
                    .group_by(instance::Column::DeploymentId)
                    .group_by(instance::Column::State)
                    .group_by(instance::Column::Health)
                    .into_tuple()
                    .all(&self.db)
                    .await?;
            let mut by_deployment: HashMap<
                DeploymentId,
                Vec<(InstanceState, InstanceHealth, i64)>,
            > = HashMap::new();
            for (id, state, health, count) in counts {
                by_deployment
                    .entry(id)
                    .or_default()
                    .push((state, health, count));
            }
            for (id, spec) in chunk {
                let replicas = serde_json::from_value::<ServiceSpec>(spec.clone())
                    .map_err(AppError::internal)?
                    .replicas;
                let instances = by_deployment.remove(id).unwrap_or_default();
                if !rollout_done(replicas, instances) {
                    continue;
                }
                let txn = crate::db::begin_write(&self.db).await?;
                self.lease_fence(&txn, Work::Deploys).await?;
                let settled = deployment_settle(&txn, *id).await?;
                txn.commit().await?;
                if let Some(settled) = settled {
                    tracing::info!(deployment = %id, "rollout settled by the sweep");
                    self.settled_notify(&settled);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_is_done_when_nothing_is_being_made_and_enough_serve() {
        let running = (InstanceState::Running, InstanceHealth::Healthy, 2);
        assert!(rollout_done(2, [running]));
        assert!(rollout_done(0, []));
        assert!(!rollout_done(3, [running]), "too few serve");
        assert!(
            !rollout_done(
                2,
                [
                    running,
                    (InstanceState::Starting, InstanceHealth::Unknown, 1)
                ]
            ),
            "one is still starting"
        );
        assert!(!rollout_done(
            2,
            [(InstanceState::Running, InstanceHealth::Unhealthy, 2)]
        ));
        // Failed ones being removed do not hold a rollout that has its replicas.
        assert!(rollout_done(
            2,
            [
                running,
                (InstanceState::Failed, InstanceHealth::Unhealthy, 1)
            ]
        ));
    }
}
