//! The intake worker: on the replica that leads the deploys, queued deliveries become
//! deployments, oldest first, one transaction each (see [`crate::app::git::intake`]); and the
//! purge of processed deliveries.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, LockType};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use crate::app::App;
use crate::app::deploys::deployments::DeploymentPush;
use crate::app::deploys::deployments::deployment_insert;
use crate::app::deploys::pipeline::deploy_control_read;
use crate::app::git::installations::PushBinding;
use crate::app::git::intake::{KEEP, QUEUED_CONDITION};
use crate::app::git::statuses::status_owed;
use crate::app::projects::services::spec::ServiceSpec;
use crate::app::shared::audit::{AuditEntry, audit_record_system};
use crate::entity::git_delivery::GitDeliveryState;
use crate::entity::{deployment, git_delivery, git_installation, project, service};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::ServiceId;

/// Deliveries read per query of the queue.
const BATCH: u64 = 100;
/// How often making a delivery's deployments is tried before it is marked `failed`.
const TRIES: u64 = 3;
/// How often the queue is read without a hint.
pub const INTAKE_EVERY: Duration = Duration::from_secs(1);

impl App {
    /// Deploys the queued deliveries, oldest first, until none is left or the pipeline is
    /// paused; returns how many it processed.
    pub async fn push_intake_pass(&self) -> AppResult<usize> {
        let mut processed = 0;
        loop {
            if self.deploy_control().await?.paused {
                break;
            }
            let head = git_delivery::Entity::find()
                .filter(Expr::cust(QUEUED_CONDITION))
                .order_by_asc(git_delivery::Column::Id)
                .limit(BATCH)
                .all(&self.db)
                .await?;
            let read = head.len();
            for delivery in head {
                match self.push_deploy_tries(delivery).await? {
                    Claim::Processed => processed += 1,
                    Claim::TakenElsewhere => {}
                    Claim::Paused => return Ok(processed),
                }
            }
            if read < BATCH as usize {
                break;
            }
        }
        metrics::gauge!("git_deliveries_queued").set(self.git_deliveries_queued().await? as f64);
        Ok(processed)
    }

    /// [`Self::push_deploy`], tried [`TRIES`] times (a deadlock, a busy database) before the
    /// delivery is marked `failed`; an unreachable database ends the pass instead, leaving
    /// the delivery queued.
    async fn push_deploy_tries(&self, delivery: git_delivery::Model) -> AppResult<Claim> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.push_deploy(delivery.clone()).await {
                Ok(done) => return Ok(done),
                Err(err) if err.code == ErrorCode::NotReady => return Err(err),
                Err(err) if tries < TRIES => {
                    tracing::warn!(delivery = %delivery.id, error = %err, "push intake: trying the delivery again");
                    tokio::time::sleep(Duration::from_millis(100 * tries)).await;
                }
                Err(err) => {
                    tracing::error!(delivery = %delivery.id, error = %err, "push intake: the delivery failed");
                    self.push_fail(delivery.id, &err).await?;
                    return Ok(Claim::Processed);
                }
            }
        }
    }

    /// Makes the deployments of one delivery, in one transaction with its claim, unless
    /// another replica took it first or the pipeline is paused. The pause is read in the
    /// claim's transaction: a delivery received after a pause was answered is never deployed
    /// by a pass that began before it.
    async fn push_deploy(&self, delivery: git_delivery::Model) -> AppResult<Claim> {
        let txn = crate::db::begin_write(&self.db).await?;
        let now = Utc::now();
        let claimed = git_delivery::Entity::update_many()
            .col_expr(
                git_delivery::Column::State,
                Expr::value(GitDeliveryState::Deployed),
            )
            .col_expr(git_delivery::Column::ProcessedAt, Expr::value(now))
            .filter(git_delivery::Column::Id.eq(delivery.id))
            .filter(git_delivery::Column::State.eq(GitDeliveryState::Queued))
            .exec(&txn)
            .await?
            .rows_affected;
        if claimed == 0 {
            return Ok(Claim::TakenElsewhere);
        }
        if deploy_control_read(&txn).await?.paused {
            txn.rollback().await?;
            return Ok(Claim::Paused);
        }
        // Writes in a project queue on its row, as the API's do (deployment numbers).
        project::Entity::find_by_id(delivery.project_id)
            .lock(LockType::NoKeyUpdate)
            .one(&txn)
            .await?;
        let installation = git_installation::Entity::find_by_id(delivery.installation_id)
            .one(&txn)
            .await?
            .ok_or_else(|| AppError::internal("a delivery outlived its installation"))?;
        let bindings: Vec<PushBinding> =
            serde_json::from_value(installation.bindings.clone()).map_err(AppError::internal)?;
        let push = DeploymentPush {
            delivery_id: delivery.id,
            repository: delivery.repository.clone(),
            branch: delivery.branch.clone(),
            commit: delivery.commit_sha.clone(),
            message: delivery.commit_message.clone(),
            pushed_at: delivery.pushed_at,
        };
        let mut made = Vec::new();
        let mut skipped = Vec::new();
        let mut services = Vec::new();
        for binding in bindings.iter().filter(|b| {
            b.branch == delivery.branch && b.repository.eq_ignore_ascii_case(&delivery.repository)
        }) {
            let Some(found) = service::Entity::find_by_id(binding.service_id)
                .filter(service::Column::ProjectId.eq(delivery.project_id))
                .one(&txn)
                .await?
            else {
                skipped.push(format!("service {} no longer exists", binding.service_id));
                continue;
            };
            if let Some(newer) = push_deployed_since(&txn, found.id, delivery.pushed_at).await? {
                skipped.push(format!(
                    "{} deployed a newer push already (commit {})",
                    found.name,
                    newer.commit.chars().take(12).collect::<String>()
                ));
                continue;
            }
            let mut spec = ServiceSpec::of(&found)?;
            spec.revision = Some(push.revision());
            let created = deployment_insert(&txn, None, &found, spec, None, Some(&push)).await?;
            status_owed(
                &txn,
                &installation,
                &created,
                &delivery.repository,
                &delivery.commit_sha,
            )
            .await?;
            audit_record_system(
                &txn,
                AuditEntry {
                    action: "deployment.create",
                    resource_type: "deployment",
                    resource_id: created.id.to_string(),
                    project_id: Some(created.project_id),
                    details: serde_json::json!({
                        "service_id": created.service_id,
                        "number": created.number,
                        "state": created.state,
                        "push": push,
                    }),
                },
            )
            .await?;
            services.push(found.id);
            made.push(created.id);
        }
        let (state, reason) = if made.is_empty() {
            let reason = if skipped.is_empty() {
                format!(
                    "no binding deploys branch `{}` of {}",
                    delivery.branch, delivery.repository
                )
            } else {
                skipped.join("; ")
            };
            (GitDeliveryState::Ignored, reason)
        } else {
            (GitDeliveryState::Deployed, skipped.join("; "))
        };
        git_delivery::Entity::update_many()
            .col_expr(git_delivery::Column::State, Expr::value(state))
            .col_expr(git_delivery::Column::Reason, Expr::value(reason))
            .col_expr(
                git_delivery::Column::DeploymentIds,
                Expr::value(serde_json::json!(made)),
            )
            .filter(git_delivery::Column::Id.eq(delivery.id))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        metrics::counter!("git_push_deployments_total").increment(made.len() as u64);
        if !services.is_empty() {
            self.changes.routes_changed(services);
            self.deployments_changed();
        }
        Ok(Claim::Processed)
    }

    /// Marks a delivery whose deployments could not be made `failed`, so that it does not
    /// block the queue.
    async fn push_fail(&self, id: Uuid, err: &AppError) -> AppResult<()> {
        git_delivery::Entity::update_many()
            .col_expr(
                git_delivery::Column::State,
                Expr::value(GitDeliveryState::Failed),
            )
            .col_expr(
                git_delivery::Column::Reason,
                Expr::value(format!("making its deployments failed: {}", err.detail)),
            )
            .col_expr(git_delivery::Column::ProcessedAt, Expr::value(Utc::now()))
            .filter(git_delivery::Column::Id.eq(id))
            .filter(git_delivery::Column::State.eq(GitDeliveryState::Queued))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Removes the deliveries processed more than [`KEEP`] ago; returns how many.
    pub async fn git_deliveries_purge(&self) -> AppResult<u64> {
        Ok(git_delivery::Entity::delete_many()
            .filter(git_delivery::Column::State.ne(GitDeliveryState::Queued))
            .filter(git_delivery::Column::ReceivedAt.lt(Utc::now() - KEEP))
            .exec(&self.db)
            .await?
            .rows_affected)
    }
}

/// What became of a delivery a pass tried to claim.
enum Claim {
    /// Its deployments were made (or it was marked `failed` or `ignored`).
    Processed,
    /// Another replica claimed it first.
    TakenElsewhere,
    /// The pipeline is paused: it stays queued, and the pass ends.
    Paused,
}

/// The push a deployment of `service_id` was last made from, if it was pushed after
/// `pushed_at`.
async fn push_deployed_since(
    db: &impl ConnectionTrait,
    service_id: ServiceId,
    pushed_at: DateTime<Utc>,
) -> AppResult<Option<DeploymentPush>> {
    let last = deployment::Entity::find()
        .filter(deployment::Column::ServiceId.eq(service_id))
        .filter(deployment::Column::PushDeliveryId.is_not_null())
        .order_by_desc(deployment::Column::Number)
        .one(db)
        .await?;
    let Some(push) = last.and_then(|d| d.push) else {
        return Ok(None);
    };
    let push: DeploymentPush = serde_json::from_value(push).map_err(AppError::internal)?;
    Ok((push.pushed_at > pushed_at).then_some(push))
}
