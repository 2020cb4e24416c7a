//! The reconciler's drain step: instances out of the routes for the grace period go to
//! removal.

use chrono::{Duration as ChronoDuration, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::events::{DeploymentEventKind, event_append};
use crate::app::deploys::instances::instance_transition;
use crate::entity::instance;
use crate::entity::instance::InstanceState;
use crate::error::{AppError, AppResult};

/// Drained instances sent to removal in one pass at most.
const DRAINED_PER_PASS: usize = 256;

impl App {
    /// Instances that have been out of the routes for the grace period go to removal, at most
    /// [`DRAINED_PER_PASS`] in one transaction; answers whether more are due.
    pub(super) async fn instances_drained_remove(&self) -> AppResult<bool> {
        let cutoff = Utc::now()
            - ChronoDuration::from_std(self.reconciler.settings.drain_grace)
                .map_err(AppError::internal)?;
        let mut due = instance::Entity::find()
            .filter(instance::Column::State.eq(InstanceState::Draining))
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
            let moved = instance_transition(
                &txn,
                row,
                InstanceState::Draining,
                InstanceState::Removing,
                |u| u,
            )
            .await?;
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
}
