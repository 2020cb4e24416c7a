//! The operator's controls of the deploy pipeline (administrators): pause it (operations in
//! flight finish; nothing new starts; placement and health checks go on), resume it, and set
//! its drain rate, so that a backlog built up during a pause or an outage drains at a chosen
//! pace rather than all at once. The controls are stored (one row), so every replica and every
//! restart honours them; the status shows the reconciler of the answering server.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ConnectionTrait, EntityTrait, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::App;
use crate::app::deploys::reconciler::ReconcilerStatus;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::authz::{OpContext, Principal};
use crate::entity::deploy_control;
use crate::error::{AppError, AppResult};

const CONTROL_ID: i32 = 1;
/// The highest drain rate accepted, in operations a second.
pub const MAX_DRAIN_RATE: f64 = 10_000.0;

/// The pipeline's controls and the reconciler's status.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeployPipelineView {
    /// No new provider operation starts while paused.
    pub paused: bool,
    /// Why it was paused (as the operator said).
    pub reason: String,
    /// Provider operations started a second at most, across providers; 0: no limit beyond
    /// the concurrency and the per-provider rates.
    pub drain_rate: f64,
    /// When an operator last changed the controls; absent until one has.
    pub updated_at: Option<DateTime<Utc>>,
    /// The reconciler of the server that answered.
    pub reconciler: ReconcilerStatus,
}

/// Pausing: why.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployPause {
    /// Shown in the pipeline's status and the audit log (at most 500 characters).
    #[serde(default)]
    #[schema(max_length = 500)]
    pub reason: String,
}

/// Changes to the pipeline's pace.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployPipelineUpdate {
    /// Provider operations started a second at most (0 to 10000; 0: no limit).
    #[schema(minimum = 0, maximum = 10000)]
    pub drain_rate: f64,
}

fn control_default() -> deploy_control::Model {
    deploy_control::Model {
        id: CONTROL_ID,
        paused: false,
        drain_rate: 0.0,
        reason: String::new(),
        updated_at: DateTime::<Utc>::UNIX_EPOCH,
    }
}

/// The stored controls as `db` sees them: in a transaction, a pause committed before it
/// began is seen.
pub async fn deploy_control_read(db: &impl ConnectionTrait) -> AppResult<deploy_control::Model> {
    Ok(deploy_control::Entity::find_by_id(CONTROL_ID)
        .one(db)
        .await?
        .unwrap_or_else(control_default))
}

impl App {
    /// The stored controls (the defaults until an operator changes them).
    pub async fn deploy_control(&self) -> AppResult<deploy_control::Model> {
        deploy_control_read(&self.db).await
    }

    pub async fn deploy_pipeline_view(
        &self,
        principal: &Principal,
    ) -> AppResult<DeployPipelineView> {
        principal.require_admin()?;
        let stored = deploy_control::Entity::find_by_id(CONTROL_ID)
            .one(&self.db)
            .await?;
        let updated_at = stored.as_ref().map(|control| control.updated_at);
        let control = stored.unwrap_or_else(control_default);
        Ok(DeployPipelineView {
            paused: control.paused,
            reason: control.reason,
            drain_rate: control.drain_rate,
            updated_at,
            reconciler: self.reconciler.status(),
        })
    }

    pub async fn deploy_pipeline_pause(
        &self,
        ctx: &OpContext,
        pause: DeployPause,
    ) -> AppResult<DeployPipelineView> {
        ctx.principal.require_admin()?;
        if pause.reason.chars().count() > 500 || pause.reason.chars().any(char::is_control) {
            return Err(AppError::invalid(
                "`reason` must be at most 500 characters, without control characters",
            ));
        }
        self.deploy_control_save(ctx, "deploy.pause", |control| {
            control.paused = true;
            control.reason = pause.reason.trim().to_owned();
        })
        .await
    }

    pub async fn deploy_pipeline_resume(&self, ctx: &OpContext) -> AppResult<DeployPipelineView> {
        ctx.principal.require_admin()?;
        self.deploy_control_save(ctx, "deploy.resume", |control| {
            control.paused = false;
            control.reason = String::new();
        })
        .await
    }

    pub async fn deploy_pipeline_update(
        &self,
        ctx: &OpContext,
        update: DeployPipelineUpdate,
    ) -> AppResult<DeployPipelineView> {
        ctx.principal.require_admin()?;
        if !(0.0..=MAX_DRAIN_RATE).contains(&update.drain_rate) || update.drain_rate.is_nan() {
            return Err(AppError::invalid("`drain_rate` must be 0 to 10000"));
        }
        self.deploy_control_save(ctx, "deploy.drain_rate", |control| {
            control.drain_rate = update.drain_rate;
        })
        .await
    }

    async fn deploy_control_save(
        &self,
        ctx: &OpContext,
        action: &'static str,
        change: impl FnOnce(&mut deploy_control::Model),
    ) -> AppResult<DeployPipelineView> {
        let txn = crate::db::begin_write(&self.db).await?;
        let existing = deploy_control::Entity::find_by_id(CONTROL_ID)
            .one(&txn)
            .await?;
        let mut control = existing.clone().unwrap_or_else(control_default);
        change(&mut control);
        control.updated_at = Utc::now();
        let mut row: deploy_control::ActiveModel = control.clone().into();
        row.paused = Set(control.paused);
        row.drain_rate = Set(control.drain_rate);
        row.reason = Set(control.reason.clone());
        row.updated_at = Set(control.updated_at);
        if existing.is_some() {
            row.update(&txn).await?;
        } else {
            row.id = Set(CONTROL_ID);
            row.insert(&txn).await?;
        }
        audit_record(
            &txn,
            ctx,
            AuditEntry {
                action,
                resource_type: "deploy_pipeline",
                resource_id: "deploy-pipeline".into(),
                project_id: None,
                details: serde_json::json!({
                    "paused": control.paused,
                    "drain_rate": control.drain_rate,
                    "reason": control.reason,
                }),
            },
        )
        .await?;
        txn.commit().await?;
        self.deployments_changed();
        self.deploy_pipeline_view(&ctx.principal).await
    }
}
