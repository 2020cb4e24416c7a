//! Which plugin version a provider runs: activation (health-checked first), rollback, the
//! activation history, manual probes, and the start-up that registers the bundled plugins
//! and loads every provider's plugin.
//!
//! Activation checks the new version's `health` first and refuses one that fails it; the
//! switch is then recorded (provider row, activation history, audit log) in one transaction
//! and made in the registry atomically, so calls in flight finish on the old version and new
//! calls use the new one. A refused activation is recorded too (the provider's events and the
//! audit log).
//!
//! The activation history is a stack: an activation pushes its version, a rollback pops the
//! current one and returns to the one below it. Rolling back twice goes two versions back (or
//! is refused when there is nothing left), never forward again; going forward is an
//! activation of the newer digest.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::providers::plugin_binaries::{
    Stored, config_keys_of, config_missing_check, digest_validate, plugin_binary_find, plugin_wasm,
};
use crate::app::providers::{
    ProviderView, json_map, limits_of, plugin_env, provider_audit, provider_find,
};
use crate::app::shared::audit::audit_record;
use crate::app::shared::pagination::{OrderedPageParams, Page, paginate_ordered};
use crate::authz::{OpContext, Principal};
use crate::entity::provider::ProviderHealth;
use crate::entity::provider_activation::ActivationAction;
use crate::entity::provider_event::ProviderEventKind;
use crate::entity::{provider, provider_activation, provider_event};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::plugins::{HealthStatus, PluginEnv, PluginError};

/// The stored binary to switch a provider to.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderActivate {
    /// The hex SHA-256 of an uploaded binary.
    #[schema(pattern = "^[0-9a-fA-F]{64}$")]
    pub digest: String,
}

/// One switch of a provider's plugin.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderActivationView {
    pub id: Uuid,
    pub digest: String,
    pub action: ActivationAction,
    pub actor_user_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<provider_activation::Model> for ProviderActivationView {
    fn from(m: provider_activation::Model) -> Self {
        Self {
            id: m.id,
            digest: m.digest,
            action: m.action,
            actor_user_id: m.actor_user_id,
            created_at: m.created_at,
        }
    }
}

/// The answer of a health probe of the active plugin.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderProbeView {
    /// `healthy`, `degraded` or `unavailable` (also when the call failed).
    #[schema(value_type = crate::app::providers::breaker::ProviderHealth)]
    pub status: String,
    pub message: String,
    /// Why the call failed, when it did.
    pub error: Option<String>,
    /// The plugin version that answered.
    pub digest: String,
    pub duration_ms: f64,
}

fn status_name(status: HealthStatus) -> &'static str {
    match status {
        HealthStatus::Healthy => "healthy",
        HealthStatus::Degraded => "degraded",
        HealthStatus::Unavailable => "unavailable",
    }
}

/// The provider's versions as the activation history leaves them: the last runs now, the one
/// before it is what a rollback returns to.
async fn activation_stack(db: &impl ConnectionTrait, provider: &str) -> AppResult<Vec<String>> {
    let history = provider_activation::Entity::find()
        .filter(provider_activation::Column::Provider.eq(provider))
        .order_by_asc(provider_activation::Column::CreatedAt)
        .order_by_asc(provider_activation::Column::Id)
        .all(db)
        .await?;
    let mut stack = Vec::new();
    for switch in history {
        stack_apply(&mut stack, switch.action, switch.digest);
    }
    Ok(stack)
}

/// One switch on the stack: a rollback pops the version it left (its target is then on top).
fn stack_apply(stack: &mut Vec<String>, action: ActivationAction, digest: String) {
    if action == ActivationAction::Rollback {
        stack.pop();
        if stack.last() != Some(&digest) {
            stack.push(digest);
        }
    } else {
        stack.push(digest);
    }
}

/// What a rollback from `stack` returns to.
fn rollback_target(stack: &[String]) -> Option<&String> {
    stack.iter().rev().nth(1)
}

async fn activation_record(
    db: &impl ConnectionTrait,
    provider: &str,
    digest: &str,
    action: ActivationAction,
    actor: Option<Uuid>,
) -> AppResult<()> {
    provider_activation::ActiveModel {
        id: Set(Uuid::now_v7()),
        provider: Set(provider.to_owned()),
        digest: Set(digest.to_owned()),
        action: Set(action),
        actor_user_id: Set(actor),
        created_at: Set(Utc::now()),
    }
    .insert(db)
    .await?;
    Ok(())
}

impl App {
    /// Switches `name` to the stored binary `digest` after checking its health.
    pub async fn provider_activate(
        &self,
        ctx: &OpContext,
        name: &str,
        activate: ProviderActivate,
    ) -> AppResult<(i64, ProviderView)> {
        ctx.principal.require_admin()?;
        let digest = digest_validate(&activate.digest)?;
        self.provider_switch(ctx, name, Some(digest), ActivationAction::Activate)
            .await
    }

    /// Switches `name` back to the binary active before its last switch.
    pub async fn provider_rollback(
        &self,
        ctx: &OpContext,
        name: &str,
    ) -> AppResult<(i64, ProviderView)> {
        ctx.principal.require_admin()?;
        self.provider_switch(ctx, name, None, ActivationAction::Rollback)
            .await
    }

    /// Activation and rollback. A rollback returns to a version that ran before, so it skips
    /// the health check (an outage of the provider's API must not prevent it); an activation
    /// refuses a version whose `health` fails or reports `unavailable`.
    async fn provider_switch(
        &self,
        ctx: &OpContext,
        name: &str,
        digest: Option<String>,
        action: ActivationAction,
    ) -> AppResult<(i64, ProviderView)> {
        let slot = self.providers.slot(name);
        let _changing = slot.changing.lock().await;
        let current = provider_find(&self.db, name).await?;
        let target = match digest {
            Some(digest) => digest,
            None => rollback_target(&activation_stack(&self.db, name).await?)
                .cloned()
                .ok_or_else(|| {
                    AppError::new(
                        ErrorCode::NothingToRollBack,
                        "this provider has no earlier version in its activation history",
                    )
                })?,
        };
        let binary = plugin_binary_find(&self.db, &target).await?;
        config_missing_check(
            &binary.name,
            &config_keys_of(&binary),
            &json_map(&current.config),
            &json_map(&current.secrets),
        )?;
        let mut next = current.clone();
        next.plugin_digest = Some(target.clone());
        let wasm = plugin_wasm(&self.db, &target).await?;
        let plugin = self.plugin_load_for(&wasm, &next)?;
        let env = plugin_env(&next, &self.secrets)?;
        if action == ActivationAction::Activate
            && let Err(refused) = self.provider_health_gate(&plugin, &env).await
        {
            self.provider_activation_refused_record(ctx, &current, &binary, &refused)
                .await?;
            return Err(refused);
        }
        let serve = next.enabled.then_some((plugin, env));
        let (revision, view) = self
            .provider_switch_record(ctx, current, &target, action, serve)
            .await?;
        tracing::info!(provider = %name, digest = %target, version = %binary.version, %action, "provider plugin switched");
        Ok((revision, view))
    }

    async fn provider_health_gate(
        &self,
        plugin: &crate::plugins::Plugin,
        env: &Arc<PluginEnv>,
    ) -> AppResult<()> {
        let refused = |why: String| {
            AppError::new(
                ErrorCode::PluginUnhealthy,
                format!("activation refused: the new version's health check {why}"),
            )
        };
        match self.providers.host.plugin_health(plugin, env).await {
            Ok(report) if report.status == HealthStatus::Unavailable => {
                Err(refused(format!("reports unavailable: {}", report.message)))
            }
            Ok(_) => Ok(()),
            Err(err) => Err(refused(format!("failed: {err}"))),
        }
    }

    /// Records an activation refused by the health gate: an event of the provider and an audit
    /// event, so that the operator sees it next to the provider's health changes.
    async fn provider_activation_refused_record(
        &self,
        ctx: &OpContext,
        current: &provider::Model,
        binary: &crate::entity::plugin_binary::Model,
        refused: &AppError,
    ) -> AppResult<()> {
        let reason = format!(
            "activation of {} {} ({}) refused: {}",
            binary.name, binary.version, binary.digest, refused.detail
        );
        let reason: String = reason.chars().take(1000).collect();
        let txn = crate::db::begin_write(&self.db).await?;
        provider_event::ActiveModel {
            id: Set(Uuid::now_v7()),
            provider: Set(current.name.clone()),
            kind: Set(ProviderEventKind::ActivationRefused),
            from_health: Set(current.health),
            to_health: Set(current.health),
            reason: Set(reason.clone()),
            created_at: Set(Utc::now()),
        }
        .insert(&txn)
        .await?;
        let details = serde_json::json!({ "digest": binary.digest, "version": binary.version, "reason": reason });
        audit_record(
            &txn,
            ctx,
            provider_audit("provider.activation_refused", current, details),
        )
        .await?;
        txn.commit().await?;
        tracing::warn!(provider = %current.name, digest = %binary.digest, reason = %refused.detail, "provider plugin activation refused");
        Ok(())
    }

    /// Records a switch to `target` and, once committed, serves `prepared`.
    async fn provider_switch_record(
        &self,
        ctx: &OpContext,
        current: provider::Model,
        target: &str,
        action: ActivationAction,
        prepared: Option<(crate::plugins::Plugin, Arc<PluginEnv>)>,
    ) -> AppResult<(i64, ProviderView)> {
        let txn = crate::db::begin_write(&self.db).await?;
        let fresh = provider_find(&txn, &current.name).await?;
        if fresh.revision != current.revision {
            return Err(AppError::new(
                ErrorCode::ProviderChanged,
                "the provider changed during the activation; try again",
            ));
        }
        let mut stack = activation_stack(&txn, &fresh.name).await?;
        stack_apply(&mut stack, action, target.to_owned());
        let mut row: provider::ActiveModel = fresh.clone().into();
        row.previous_digest = Set(rollback_target(&stack).cloned());
        row.plugin_digest = Set(Some(target.to_owned()));
        row.revision = Set(fresh.revision + 1);
        row.updated_at = Set(Utc::now());
        let updated = row.update(&txn).await?;
        activation_record(
            &txn,
            &updated.name,
            target,
            action,
            Some(ctx.principal.user_id()),
        )
        .await?;
        let details =
            serde_json::json!({ "digest": target, "previous_digest": fresh.plugin_digest });
        let audit_action = if action == ActivationAction::Rollback {
            "provider.rollback"
        } else {
            "provider.activate"
        };
        audit_record(&txn, ctx, provider_audit(audit_action, &updated, details)).await?;
        txn.commit().await?;
        let slot = self.providers.slot(&updated.name);
        match prepared {
            Some((plugin, env)) => slot.activate(plugin, env, updated.revision),
            None => slot.deactivate(updated.revision),
        }
        self.changes.providers.notify();
        self.health.probe_soon(&updated.name);
        self.provider_view_load(updated).await
    }

    fn plugin_load_for(
        &self,
        wasm: &[u8],
        row: &provider::Model,
    ) -> AppResult<crate::plugins::Plugin> {
        self.providers
            .host
            .plugin_load(wasm, limits_of(row).effective())
            .map_err(|rejection| {
                AppError::new(
                    ErrorCode::PluginRejected,
                    format!("plugin rejected: {rejection}"),
                )
            })
    }

    /// Loads what `row` should run: its plugin with its limits and settings, or nothing when
    /// it is disabled or has no plugin.
    pub(crate) async fn provider_prepare(
        &self,
        db: &impl ConnectionTrait,
        row: &provider::Model,
    ) -> AppResult<Option<(crate::plugins::Plugin, Arc<PluginEnv>)>> {
        let Some(digest) = row.plugin_digest.as_deref().filter(|_| row.enabled) else {
            return Ok(None);
        };
        let wasm = plugin_wasm(db, digest).await?;
        Ok(Some((
            self.plugin_load_for(&wasm, row)?,
            plugin_env(row, &self.secrets)?,
        )))
    }

    pub async fn provider_activation_list(
        &self,
        principal: &Principal,
        name: &str,
        params: OrderedPageParams,
    ) -> AppResult<Page<provider_activation::Model>> {
        // Health reasons and versions carry the cloud's error text and settings history:
        // administrators only.
        principal.require_admin()?;
        provider_find(&self.db, name).await?;
        let select = provider_activation::Entity::find()
            .filter(provider_activation::Column::Provider.eq(name));
        let (page, order) = params.split();
        paginate_ordered(
            &self.db,
            select,
            provider_activation::Column::Id,
            |m| m.id,
            &page,
            order,
        )
        .await
    }

    /// Calls `health` on the provider's active plugin now; the answer feeds its breaker like
    /// a background probe's.
    pub async fn provider_probe(
        &self,
        principal: &Principal,
        name: &str,
    ) -> AppResult<ProviderProbeView> {
        principal.require_admin()?;
        let row = provider_find(&self.db, name).await?;
        // Waits for a probe in flight (the one a settings change started, say) rather than
        // probing the cloud twice at once.
        let gate = self.health.probe_gate(&row.name);
        let _passing = gate.lock().await;
        let active = self.provider_serving(&row).await?.ok_or_else(|| {
            AppError::new(
                ErrorCode::ProviderNotServing,
                "this provider has no active plugin, or is disabled",
            )
        })?;
        let started = Instant::now();
        let result = self
            .providers
            .host
            .plugin_health(&active.plugin, &active.env)
            .await;
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        let signal = crate::app::providers::health::probe_signal(&result);
        self.provider_health_record(&row, &active, signal, true)
            .await;
        let (status, message, error) = match result {
            Ok(report) => (status_name(report.status), report.message, None),
            Err(PluginError::Provider(err)) => {
                ("unavailable", String::new(), Some(format!("{err:?}")))
            }
            Err(err) => ("unavailable", String::new(), Some(err.to_string())),
        };
        Ok(ProviderProbeView {
            status: status.into(),
            message,
            error,
            digest: active.plugin.digest.clone(),
            duration_ms,
        })
    }

    /// At start-up (replicas taking turns): stores the bundled plugins and makes each the
    /// provider of its name when no such provider exists.
    pub async fn providers_bundled_register(&self) -> AppResult<()> {
        for bundled in self.settings.bundled_plugins.each() {
            let binary = match self.plugin_binary_store(bundled.wasm, None).await? {
                Stored::Created(binary) | Stored::AlreadyStored(binary) => binary,
            };
            let txn = crate::db::begin_write(&self.db).await?;
            if provider::Entity::find_by_id(bundled.provider.to_owned())
                .one(&txn)
                .await?
                .is_none()
            {
                let now = Utc::now();
                let config: BTreeMap<&str, &str> = bundled.config.iter().copied().collect();
                provider::ActiveModel {
                    name: Set(bundled.provider.to_owned()),
                    plugin_digest: Set(Some(binary.digest.clone())),
                    previous_digest: Set(None),
                    config: Set(serde_json::to_value(config).map_err(AppError::internal)?),
                    secrets: Set(serde_json::json!({})),
                    allowlist: Set(
                        serde_json::to_value(bundled.allowlist).map_err(AppError::internal)?
                    ),
                    limits: Set(serde_json::json!({})),
                    enabled: Set(true),
                    health: Set(ProviderHealth::Healthy),
                    health_reason: Set(String::new()),
                    health_changed_at: Set(None),
                    drained: Set(false),
                    revision: Set(1),
                    created_at: Set(now),
                    updated_at: Set(now),
                }
                .insert(&txn)
                .await?;
                activation_record(
                    &txn,
                    bundled.provider,
                    &binary.digest,
                    ActivationAction::Bundled,
                    None,
                )
                .await?;
                tracing::info!(provider = bundled.provider, digest = %binary.digest, "registered the bundled plugin");
            }
            txn.commit().await?;
        }
        Ok(())
    }

    /// At start-up, after [`Self::providers_bundled_register`]: loads every enabled provider's
    /// plugin. A provider whose plugin cannot be loaded is logged and left out of service; the
    /// server still starts.
    pub async fn providers_start(&self) -> AppResult<()> {
        self.provider_health_gauges_init().await?;
        for row in provider::Entity::find().all(&self.db).await? {
            match self.provider_prepare(&self.db, &row).await {
                Ok(Some((plugin, env))) => {
                    self.providers
                        .slot(&row.name)
                        .activate(plugin, env, row.revision)
                }
                Ok(None) => self.providers.slot(&row.name).deactivate(row.revision),
                Err(err) => {
                    tracing::error!(provider = %row.name, error = %err, "provider plugin not loaded; the provider is out of service")
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{ActivationAction, rollback_target, stack_apply};

    #[test]
    fn rollback_walks_back_through_the_history_and_never_toggles() {
        let mut stack = Vec::new();
        for (action, digest) in [
            (ActivationAction::Bundled, "a"),
            (ActivationAction::Activate, "b"),
            (ActivationAction::Activate, "c"),
        ] {
            stack_apply(&mut stack, action, digest.into());
        }
        assert_eq!(rollback_target(&stack).map(String::as_str), Some("b"));
        stack_apply(&mut stack, ActivationAction::Rollback, "b".into());
        assert_eq!(stack, ["a", "b"]);
        assert_eq!(rollback_target(&stack).map(String::as_str), Some("a"));
        stack_apply(&mut stack, ActivationAction::Rollback, "a".into());
        assert_eq!(
            rollback_target(&stack),
            None,
            "nothing before the first version"
        );
        // Forward again is an activation.
        stack_apply(&mut stack, ActivationAction::Activate, "c".into());
        assert_eq!(stack, ["a", "c"]);
        assert_eq!(rollback_target(&stack).map(String::as_str), Some("a"));
    }
}
