//! The reconciler's first step: deployments that miss instances get them, placed on the
//! providers that may take new work now, each stored with its key before any provider hears
//! of it.

use std::collections::{BTreeMap, HashSet, VecDeque};

use chrono::{Duration as ChronoDuration, Utc};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::{PLACE_PER_PASS, Reconciler, WAITING_RETRY};
use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::deployments::deployment_finish;
use crate::app::deploys::events::{DeploymentEventKind, event_append};
use crate::app::deploys::instances::{Takeover, instance_insert};
use crate::app::deploys::placement::{Candidate, GIT_SOURCE_CAPABILITY, place};
use crate::app::deploys::rollouts::deployment_settle;
use crate::app::projects::services::spec::ServiceSpec;
use crate::entity::deployment::DeploymentState;
use crate::entity::instance::InstanceState;
use crate::entity::{deployment, evacuation, instance, provider, service};
use crate::error::{AppError, AppResult};
use crate::ids::DeploymentId;

impl App {
    /// Providers that may take new instances now (enabled, not drained, not evacuated, breaker
    /// closed, a plugin serving), with their plugins' regions and whether they build code.
    pub(crate) async fn placement_candidates(&self) -> AppResult<Vec<Candidate>> {
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
            let (regions, builds_code) = match cached {
                Some(known) => known,
                None => match self
                    .providers
                    .host
                    .plugin_info(&active.plugin, &active.env)
                    .await
                {
                    Ok(info) => {
                        let known = (
                            info.regions,
                            info.capabilities
                                .iter()
                                .any(|capability| capability == GIT_SOURCE_CAPABILITY),
                        );
                        self.reconciler
                            .regions
                            .lock()
                            .expect("not poisoned")
                            .insert(cache_key, known.clone());
                        known
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
                builds_code,
            });
        }
        Ok(candidates)
    }

    /// Gives deployments their missing instances: queued ones (and rolling-out ones sent back
    /// to place a replacement), oldest first, at most [`PLACE_PER_PASS`]; and every
    /// [`WAITING_RETRY`], those waiting for room. Answers whether more are queued than one
    /// pass placed.
    pub(super) async fn deployments_place(&self) -> AppResult<bool> {
        let mut found = deployment::Entity::find()
            .filter(
                Condition::any()
                    .add(deployment::Column::State.eq(DeploymentState::Queued))
                    .add(
                        Condition::all()
                            .add(deployment::Column::State.eq(DeploymentState::Placing))
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
                    .filter(deployment::Column::State.eq(DeploymentState::Placing))
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
                    .error_record(format!("placing deployment {}: {err}", found.id));
            }
        }
        Ok(more)
    }

    async fn deployment_place(&self, id: DeploymentId, candidates: &[Candidate]) -> AppResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        let Some(found) = deployment::Entity::find_by_id(id)
            .filter(
                deployment::Column::State
                    .is_in([DeploymentState::Queued, DeploymentState::Placing]),
            )
            .lock_exclusive()
            .one(&txn)
            .await?
        else {
            return Ok(());
        };
        let spec: ServiceSpec =
            serde_json::from_value(found.spec.clone()).map_err(AppError::internal)?;
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
            .filter(|i| InstanceState::ACTIVE.contains(&i.state))
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
            .filter(|i| InstanceState::ACTIVE.contains(&i.state))
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
        let state: DeploymentState;
        let mut reason = found.reason.clone();
        let mut inserted = 0;
        if needed > 0 {
            match place(
                &spec.placement,
                &spec.regions,
                spec.builds_code(),
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
                    state = DeploymentState::RollingOut;
                    reason = String::new();
                }
                Err(why) => {
                    let deadline = found.created_at
                        + ChronoDuration::seconds(i64::from(spec.health_check.start_timeout_secs));
                    if Utc::now() > deadline {
                        deployment_finish(
                            &txn,
                            &found,
                            DeploymentState::Failed,
                            format!("could not place {needed} instance(s): {why}; the previous version keeps serving"),
                        )
                        .await?;
                        txn.commit().await?;
                        self.changes.routes_changed([found.service_id]);
                        self.deployments_changed();
                        return Ok(());
                    }
                    state = DeploymentState::Placing;
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
            state = DeploymentState::RollingOut;
        }
        let changed = state != found.state || reason != found.reason;
        if changed {
            if state != found.state {
                event_append(
                    &txn,
                    found.id,
                    if state == DeploymentState::RollingOut {
                        DeploymentEventKind::DeploymentRollingOut
                    } else {
                        DeploymentEventKind::DeploymentPlacing
                    },
                    if state == DeploymentState::RollingOut {
                        format!("rolling out {} instance(s)", spec.replicas)
                    } else {
                        "placing instances".into()
                    },
                    serde_json::json!({ "state": state }),
                )
                .await?;
            }
            deployment::Entity::update_many()
                .col_expr(deployment::Column::State, Expr::value(state))
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
        let settled = if state == DeploymentState::RollingOut && inserted == 0 {
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
}
