//! Reconciler step: a running instance of a healthy deployment that has been unhealthy for
//! [`DeploySettings::unhealthy_replace_after`] gets a replacement, placed as the deployment's
//! instances are (the others' providers counted, so the spread is kept). The unhealthy one
//! keeps its place until the replacement passes its checks, and then drains, as an evacuated
//! one does ([`crate::app::deploys::health`]); if it recovers first, the replacement still takes
//! over (it is healthy, and the one it replaces was not for a while).
//!
//! A replacement that never gets healthy fails; the next one waits
//! [`REPLACE_BACKOFF_INITIAL`], doubled with each failed one up to [`REPLACE_BACKOFF_MAX`], so
//! that a workload sick everywhere does not turn into a stream of provisions. The provider
//! calls go through the pipeline's limits like every other operation.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::instances::{Takeover, replacement_place};
use crate::app::deploys::placement::Candidate;
use crate::entity::deployment::DeploymentState;
use crate::entity::instance::{InstanceHealth, InstanceState};
use crate::entity::{deployment, instance};
use crate::error::AppResult;

/// How long after a failed replacement the next one may be placed, doubled with each failure.
pub const REPLACE_BACKOFF_INITIAL: Duration = Duration::from_secs(30);
pub const REPLACE_BACKOFF_MAX: Duration = Duration::from_secs(600);

impl App {
    pub(crate) async fn instances_unhealthy_replace(&self) -> AppResult<()> {
        let after = ChronoDuration::from_std(self.reconciler.settings.unhealthy_replace_after)
            .unwrap_or(ChronoDuration::MAX);
        let sick = instance::Entity::find()
            .filter(instance::Column::State.eq(InstanceState::Running))
            .filter(instance::Column::Health.eq(InstanceHealth::Unhealthy))
            .filter(instance::Column::HealthCheckedAt.lt(Utc::now() - after))
            .all(&self.db)
            .await?;
        if sick.is_empty() {
            return Ok(());
        }
        let candidates = self.placement_candidates().await?;
        for old in sick {
            if let Err(err) = self.instance_unhealthy_replace(&old, &candidates).await {
                self.reconciler.error_record(format!(
                    "replacing the unhealthy {}: {err}",
                    old.instance_key
                ));
            }
        }
        Ok(())
    }

    /// Replaces `old` if it is due: read first, outside any transaction, so that a pass that
    /// finds a replacement on its way (or in its backoff) writes nothing.
    async fn instance_unhealthy_replace(
        &self,
        old: &instance::Model,
        candidates: &[Candidate],
    ) -> AppResult<()> {
        let Some(owner) = self.replacement_due(old).await? else {
            return Ok(());
        };
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        let others = instance::Entity::find()
            .filter(instance::Column::DeploymentId.eq(owner.id))
            .filter(instance::Column::State.is_in(InstanceState::ACTIVE))
            .filter(instance::Column::Id.ne(old.id))
            .all(&txn)
            .await?;
        if others.iter().any(|other| other.replaces == Some(old.id)) {
            return Ok(()); // placed since the read
        }
        let mut placed: BTreeMap<String, u32> = BTreeMap::new();
        for other in others {
            *placed.entry(other.provider).or_default() += 1;
        }
        let waiting = format!("cannot replace the unhealthy {} yet", old.instance_key);
        let takeover = (old, Takeover::Unhealthy);
        replacement_place(&txn, &owner, takeover, candidates, &placed, &waiting).await?;
        txn.commit().await?;
        self.deployments_changed();
        Ok(())
    }

    /// The healthy deployment of `old` when `old` should get a replacement now: none on its
    /// way, and the backoff after the failed ones over.
    async fn replacement_due(&self, old: &instance::Model) -> AppResult<Option<deployment::Model>> {
        let Some(owner) = deployment::Entity::find_by_id(old.deployment_id)
            .one(&self.db)
            .await?
            .filter(|owner| owner.state == DeploymentState::Healthy)
        else {
            return Ok(None); // a rollout, or one being replaced: its own steps decide
        };
        let earlier = instance::Entity::find()
            .filter(instance::Column::Replaces.eq(old.id))
            .all(&self.db)
            .await?;
        if earlier
            .iter()
            .any(|r| InstanceState::ACTIVE.contains(&r.state))
        {
            return Ok(None); // one is on its way
        }
        if let Some(last) = earlier.iter().map(|r| r.updated_at).max() {
            let wait = replace_backoff(earlier.len());
            if Utc::now() < last + ChronoDuration::from_std(wait).unwrap_or(ChronoDuration::MAX) {
                return Ok(None);
            }
        }
        Ok(Some(owner))
    }
}

/// How long to wait after the last of `failed` replacements before placing another.
fn replace_backoff(failed: usize) -> Duration {
    let doublings = u32::try_from(failed.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(16);
    REPLACE_BACKOFF_INITIAL
        .saturating_mul(1 << doublings)
        .min(REPLACE_BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_after_each_failed_replacement_up_to_its_cap() {
        assert_eq!(replace_backoff(1), Duration::from_secs(30));
        assert_eq!(replace_backoff(2), Duration::from_secs(60));
        assert_eq!(replace_backoff(3), Duration::from_secs(120));
        assert_eq!(replace_backoff(6), Duration::from_secs(600));
        assert_eq!(replace_backoff(1000), Duration::from_secs(600));
    }
}
