//! Evacuating a provider: every instance running there is re-placed elsewhere,
//! make-before-break (the old one drains only once its replacement is healthy), then removed
//! where the provider can still be reached; keys it could not remove are listed (removal goes
//! on with backoff). While an evacuation runs, the provider takes no new instances. It can be
//! cancelled: replacements not yet serving are removed, and the instances that were not moved
//! stay where they are.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::deployments;
use crate::app::deploys::instances::{Takeover, instance_transition, replacement_place};
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::authz::{OpContext, Principal};
use crate::entity::evacuation::EvacuationState;
use crate::entity::instance::{InstanceHealth, InstanceState};
use crate::entity::{deployment, evacuation, instance, provider};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::InstanceId;

/// An evacuation of a provider, and how far it got.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EvacuationView {
    pub id: Uuid,
    pub provider: String,
    /// `running`, `done` or `cancelled`.
    pub state: EvacuationState,
    /// Instances to move.
    pub total: i32,
    /// Instances whose replacement elsewhere is healthy.
    pub moved: i32,
    /// Keys of old instances that could not be removed at the provider yet.
    pub unremoved: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<evacuation::Model> for EvacuationView {
    fn from(m: evacuation::Model) -> Self {
        Self {
            id: m.id,
            provider: m.provider,
            state: m.state,
            total: m.total,
            moved: m.moved,
            unremoved: serde_json::from_value(m.unremoved).unwrap_or_default(),
            created_at: m.created_at,
            updated_at: m.updated_at,
            finished_at: m.finished_at,
        }
    }
}

async fn evacuation_latest(
    db: &impl ConnectionTrait,
    provider_name: &str,
) -> AppResult<evacuation::Model> {
    evacuation::Entity::find()
        .filter(evacuation::Column::Provider.eq(provider_name))
        .order_by_desc(evacuation::Column::CreatedAt)
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("evacuation"))
}

impl App {
    /// Starts evacuating `provider_name` (administrators).
    pub async fn evacuation_start(
        &self,
        ctx: &OpContext,
        provider_name: &str,
    ) -> AppResult<evacuation::Model> {
        ctx.principal.require_admin()?;
        let txn = crate::db::begin_write(&self.db).await?;
        provider::Entity::find_by_id(provider_name.to_owned())
            .one(&txn)
            .await?
            .ok_or_else(|| AppError::not_found("provider"))?;
        let running = evacuation::Entity::find()
            .filter(evacuation::Column::Provider.eq(provider_name))
            .filter(evacuation::Column::State.eq(EvacuationState::Running))
            .count(&txn)
            .await?;
        if running > 0 {
            return Err(AppError::new(
                ErrorCode::EvacuationRunning,
                format!("provider `{provider_name}` is being evacuated already"),
            ));
        }
        let total = instance::Entity::find()
            .filter(instance::Column::Provider.eq(provider_name))
            .filter(
                instance::Column::State.is_in([InstanceState::Starting, InstanceState::Running]),
            )
            .count(&txn)
            .await? as i32;
        // Instances not yet made there are placed elsewhere at once.
        let pending = instance::Entity::find()
            .filter(instance::Column::Provider.eq(provider_name))
            .filter(instance::Column::State.eq(InstanceState::Pending))
            .all(&txn)
            .await?;
        for row in &pending {
            if instance_transition(
                &txn,
                row,
                InstanceState::Pending,
                InstanceState::Failed,
                |u| {
                    u.col_expr(
                        instance::Column::LastError,
                        Expr::value("refused: provider_evacuated"),
                    )
                },
            )
            .await?
            {
                deployments::deployment_replace_instances(&txn, row.deployment_id).await?;
            }
        }
        let now = Utc::now();
        let created = evacuation::ActiveModel {
            id: Set(Uuid::now_v7()),
            provider: Set(provider_name.to_owned()),
            state: Set(EvacuationState::Running),
            total: Set(total),
            moved: Set(0),
            unremoved: Set(serde_json::json!([])),
            created_by: Set(Some(ctx.principal.user_id())),
            created_at: Set(now),
            updated_at: Set(now),
            finished_at: Set(None),
        }
        .insert(&txn)
        .await?;
        audit_record(&txn, ctx, evacuation_audit("provider.evacuate", &created)).await?;
        txn.commit().await?;
        self.deployments_changed();
        Ok(created)
    }

    /// The latest evacuation of `provider_name` (administrators).
    pub async fn evacuation_view(
        &self,
        principal: &Principal,
        provider_name: &str,
    ) -> AppResult<evacuation::Model> {
        principal.require_admin()?;
        evacuation_latest(&self.db, provider_name).await
    }

    /// Stops a running evacuation: replacements not yet serving are removed.
    pub async fn evacuation_cancel(
        &self,
        ctx: &OpContext,
        provider_name: &str,
    ) -> AppResult<evacuation::Model> {
        ctx.principal.require_admin()?;
        let txn = crate::db::begin_write(&self.db).await?;
        let found = evacuation_latest(&txn, provider_name).await?;
        if found.state != EvacuationState::Running {
            return Ok(found);
        }
        let old: Vec<InstanceId> = instance::Entity::find()
            .filter(instance::Column::Provider.eq(provider_name))
            .all(&txn)
            .await?
            .into_iter()
            .map(|row| row.id)
            .collect();
        instance::Entity::update_many()
            .col_expr(
                instance::Column::State,
                Expr::value(InstanceState::Removing),
            )
            .col_expr(instance::Column::UpdatedAt, Expr::value(Utc::now()))
            .filter(instance::Column::Replaces.is_in(old))
            .filter(instance::Column::State.is_in([
                InstanceState::Pending,
                InstanceState::Provisioning,
                InstanceState::Starting,
            ]))
            .exec(&txn)
            .await?;
        let now = Utc::now();
        evacuation::Entity::update_many()
            .col_expr(
                evacuation::Column::State,
                Expr::value(EvacuationState::Cancelled),
            )
            .col_expr(evacuation::Column::UpdatedAt, Expr::value(now))
            .col_expr(evacuation::Column::FinishedAt, Expr::value(now))
            .filter(evacuation::Column::Id.eq(found.id))
            .exec(&txn)
            .await?;
        audit_record(
            &txn,
            ctx,
            evacuation_audit("provider.evacuation_cancel", &found),
        )
        .await?;
        let cancelled = evacuation_latest(&txn, provider_name).await?;
        txn.commit().await?;
        self.deployments_changed();
        Ok(cancelled)
    }

    /// Reconciler step: replaces what runs on evacuated providers, counts what moved, and ends
    /// evacuations with nothing left to move.
    pub(crate) async fn evacuations_advance(&self) -> AppResult<()> {
        let running = evacuation::Entity::find()
            .filter(evacuation::Column::State.eq(EvacuationState::Running))
            .all(&self.db)
            .await?;
        if running.is_empty() {
            return Ok(());
        }
        let candidates = self.placement_candidates().await?;
        for found in running {
            if let Err(err) = self.evacuation_advance(&found, &candidates).await {
                self.reconciler
                    .error_record(format!("evacuating {}: {err}", found.provider));
            }
        }
        Ok(())
    }

    async fn evacuation_advance(
        &self,
        found: &evacuation::Model,
        candidates: &[crate::app::deploys::placement::Candidate],
    ) -> AppResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        let on_provider = instance::Entity::find()
            .filter(instance::Column::Provider.eq(&found.provider))
            .filter(instance::Column::CreatedAt.lt(found.created_at))
            .all(&txn)
            .await?;
        let ids: Vec<InstanceId> = on_provider.iter().map(|row| row.id).collect();
        let replacements = instance::Entity::find()
            .filter(instance::Column::Replaces.is_in(ids))
            .all(&txn)
            .await?;
        let replaced: HashSet<InstanceId> = replacements
            .iter()
            .filter(|r| InstanceState::ACTIVE.contains(&r.state))
            .filter_map(|r| r.replaces)
            .collect();
        let moved = replacements
            .iter()
            .filter(|r| r.state == InstanceState::Running && r.health == InstanceHealth::Healthy)
            .count() as i32;
        let mut still_to_move = 0;
        for old in on_provider
            .iter()
            .filter(|row| row.state == InstanceState::Running)
        {
            still_to_move += 1;
            if replaced.contains(&old.id) {
                continue;
            }
            let Some(owner) = deployment::Entity::find_by_id(old.deployment_id)
                .one(&txn)
                .await?
            else {
                continue;
            };
            let waiting = format!(
                "cannot move {} off {} yet",
                old.instance_key, found.provider
            );
            let takeover = (old, Takeover::Evacuation);
            replacement_place(
                &txn,
                &owner,
                takeover,
                candidates,
                &BTreeMap::new(),
                &waiting,
            )
            .await?;
        }
        let done = still_to_move == 0
            && !on_provider.iter().any(|row| {
                [
                    InstanceState::Pending,
                    InstanceState::Provisioning,
                    InstanceState::Starting,
                ]
                .contains(&row.state)
            });
        let now = Utc::now();
        evacuation::Entity::update_many()
            .col_expr(
                evacuation::Column::Moved,
                Expr::value(moved.max(found.moved)),
            )
            .col_expr(
                evacuation::Column::State,
                Expr::value(if done {
                    EvacuationState::Done
                } else {
                    EvacuationState::Running
                }),
            )
            .col_expr(evacuation::Column::UpdatedAt, Expr::value(now))
            .col_expr(
                evacuation::Column::FinishedAt,
                Expr::value(done.then_some(now)),
            )
            .filter(evacuation::Column::Id.eq(found.id))
            .filter(evacuation::Column::State.eq(EvacuationState::Running))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok(())
    }
}

fn evacuation_audit(action: &'static str, evacuation: &evacuation::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "provider",
        resource_id: evacuation.provider.clone(),
        project_id: None,
        details: serde_json::json!({ "evacuation_id": evacuation.id, "total": evacuation.total }),
    }
}
