//! Providers: the configured adapters to clouds and fleets (`gcp`, `aws`, `metal`, ...). Each
//! runs one stored plugin binary with its own configuration, write-only secrets, outbound
//! allowlist and limits.
//!
//! This module owns the records and their settings; which plugin version runs, activation,
//! rollback and the bundled plugins are `provider_versions`.

pub mod breaker;
pub mod health;
pub mod instances;
pub mod plugin_binaries;
pub mod sync;
pub mod versions;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::App;
use crate::app::providers::breaker::ProviderHealth;
use crate::app::providers::plugin_binaries::{
    ConfigKeyView, config_keys_of, config_missing_check, plugin_binary_find,
};
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::app::shared::validate::if_match_check;
use crate::app::shared::validate::slug_validate;
use crate::authz::{OpContext, Principal, Scope};
use crate::entity::{plugin_binary, provider};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};
use crate::plugins::{
    Allowlist, HOST_CONCURRENT_CALLS, PluginEnv, PluginLimits, endpoint_patterns,
    provider_call_share,
};
use crate::secrets::SecretBox;

/// Overrides of the default plugin limits; absent fields keep the default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderLimits {
    /// Linear-memory cap of a call, 1 to 256 MiB (default 64).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 256)]
    pub memory_mib: Option<u32>,
    /// Deadline of `info` and `health`, 10 ms to 60 s (default 2 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 10, maximum = 60000)]
    pub health_deadline_ms: Option<u32>,
    /// Deadline of the other calls, 10 ms to 300 s (default 10 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 10, maximum = 300000)]
    pub call_deadline_ms: Option<u32>,
    /// Calls that may run at once, 1 to 32 (default 16): at most a provider's share of the
    /// host's capacity, so that one busy provider cannot take the others' room.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_calls: Option<u32>,
    /// Largest HTTP response body a call may read, 1 KiB to 64 MiB (default 4 MiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65536)]
    pub http_response_kib: Option<u32>,
}

impl ProviderLimits {
    fn validate(&self) -> AppResult<()> {
        let checks = [
            ("memory_mib", self.memory_mib, 1, 256),
            ("health_deadline_ms", self.health_deadline_ms, 10, 60_000),
            ("call_deadline_ms", self.call_deadline_ms, 10, 300_000),
            (
                "max_concurrent_calls",
                self.max_concurrent_calls,
                1,
                provider_call_share(HOST_CONCURRENT_CALLS) as u32,
            ),
            ("http_response_kib", self.http_response_kib, 1, 64 * 1024),
        ];
        for (field, value, min, max) in checks {
            if value.is_some_and(|value| !(min..=max).contains(&value)) {
                return Err(AppError::invalid(format!(
                    "`limits.{field}` must be between {min} and {max}"
                )));
            }
        }
        Ok(())
    }

    /// The limits a plugin runs with: these overrides over the defaults.
    pub fn effective(&self) -> PluginLimits {
        let defaults = PluginLimits::default();
        let ms = |ms: u32| Duration::from_millis(ms.into());
        PluginLimits {
            memory_bytes: self
                .memory_mib
                .map_or(defaults.memory_bytes, |mib| mib as usize * 1024 * 1024),
            health_deadline: self.health_deadline_ms.map_or(defaults.health_deadline, ms),
            call_deadline: self.call_deadline_ms.map_or(defaults.call_deadline, ms),
            max_concurrent_calls: self
                .max_concurrent_calls
                .map_or(defaults.max_concurrent_calls, |n| n as usize),
            http_response_bytes: self
                .http_response_kib
                .map_or(defaults.http_response_bytes, |kib| u64::from(kib) * 1024),
        }
    }

    /// `limits` written out in full.
    fn of(limits: &PluginLimits) -> Self {
        let ms = |d: Duration| Some(d.as_millis() as u32);
        Self {
            memory_mib: Some((limits.memory_bytes / (1024 * 1024)) as u32),
            health_deadline_ms: ms(limits.health_deadline),
            call_deadline_ms: ms(limits.call_deadline),
            max_concurrent_calls: Some(limits.max_concurrent_calls as u32),
            http_response_kib: Some((limits.http_response_bytes / 1024) as u32),
        }
    }
}

/// The plugin a provider runs.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderPluginView {
    pub digest: String,
    pub name: String,
    pub version: String,
    pub contract_version: String,
    /// The configuration values and secrets it declares.
    pub config: Vec<ConfigKeyView>,
}

/// Calls of a provider since this server started, by outcome.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct ProviderCallsView {
    pub ok: u64,
    /// The plugin answered with a typed error of the contract.
    pub provider_errors: u64,
    pub timeouts: u64,
    pub memory_exceeded: u64,
    /// Traps, panics and host errors.
    pub crashes: u64,
}

/// A provider's state: its health, or why it takes no new work (`no_plugin`, or the
/// operator's `drained` or `disabled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderState {
    Healthy,
    Degraded,
    Unavailable,
    NoPlugin,
    Drained,
    Disabled,
}

impl From<ProviderHealth> for ProviderState {
    fn from(health: ProviderHealth) -> Self {
        match health {
            ProviderHealth::Healthy => Self::Healthy,
            ProviderHealth::Degraded => Self::Degraded,
            ProviderHealth::Unavailable => Self::Unavailable,
        }
    }
}

/// A provider as the API shows it. Everyone with the `read` scope sees its name, state and
/// health; the rest (settings, plugin, health reasons with the cloud's error text, call
/// counts) is for administrators only.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderView {
    pub name: String,
    /// `healthy`, `degraded`, `unavailable`, `no_plugin` (nothing activated: it takes no
    /// calls), or the operator's `drained` or `disabled`.
    pub state: ProviderState,
    /// What its circuit breaker last decided; absent while it has no plugin.
    pub health: Option<ProviderHealth>,
    /// Administrators only.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub details: Option<ProviderDetails>,
}

/// What administrators see of a provider besides its name, state and health.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderDetails {
    /// Why its health is what it is (the plugin's or the cloud's words).
    pub health_reason: String,
    pub health_changed_at: Option<DateTime<Utc>>,
    pub enabled: bool,
    /// No new instances; existing ones are kept.
    pub drained: bool,
    /// The active plugin; absent until one is activated.
    pub plugin: Option<ProviderPluginView>,
    /// Whether the plugin is loaded and taking calls on this server.
    pub serving: bool,
    /// What a rollback returns to: the version below the current one in the activation
    /// history (absent when there is none).
    pub previous_digest: Option<String>,
    pub config: BTreeMap<String, String>,
    /// Names of the secrets set; their values are never returned.
    pub secret_names: Vec<String>,
    /// `host:port` patterns the plugin may send HTTP requests to, as configured.
    pub allowlist: Vec<String>,
    /// What the plugin runs with: `allowlist` and the `host:port` of every `http(s)://` URL in
    /// `config` (its endpoints).
    pub effective_allowlist: Vec<String>,
    /// Overrides set on this provider.
    pub limits: ProviderLimits,
    /// The limits its calls run with.
    pub effective_limits: ProviderLimits,
    pub calls: ProviderCallsView,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ProviderView {
    /// What a caller who is not an administrator may see: name, state and health.
    pub fn public(self) -> Self {
        Self {
            details: None,
            ..self
        }
    }
}

/// A provider to configure. It runs nothing until a plugin is activated on it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderCreate {
    /// Lowercase letters, digits and `-`, e.g. `gcp`.
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
    )]
    pub name: String,
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Write-only.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    #[serde(default)]
    pub allowlist: Vec<String>,
    #[serde(default)]
    pub limits: ProviderLimits,
    #[serde(default = "enabled_default")]
    pub enabled: bool,
}

fn enabled_default() -> bool {
    true
}

/// Changes to a provider; absent fields are kept.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderUpdate {
    /// Replaces the whole configuration.
    pub config: Option<BTreeMap<String, String>>,
    /// Sets (a string) or removes (`null`) the named secrets; others are kept.
    pub secrets: Option<BTreeMap<String, Option<String>>>,
    /// Replaces the allowlist.
    pub allowlist: Option<Vec<String>>,
    /// Replaces the limit overrides.
    pub limits: Option<ProviderLimits>,
    /// A disabled provider takes no calls.
    pub enabled: Option<bool>,
    /// A drained provider takes no new instances; its existing instances are kept.
    pub drained: Option<bool>,
}

pub(crate) fn json_map(value: &serde_json::Value) -> BTreeMap<String, String> {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

fn allowlist_validate(patterns: &[String]) -> AppResult<Allowlist> {
    if patterns.len() > 64 {
        return Err(AppError::invalid(
            "`allowlist` may hold at most 64 patterns",
        ));
    }
    Allowlist::parse(patterns).map_err(|err| AppError::invalid(format!("`allowlist`: {err}")))
}

fn settings_validate(
    config: &BTreeMap<String, String>,
    secrets: &BTreeMap<String, String>,
) -> AppResult<()> {
    for (field, map) in [("config", config), ("secrets", secrets)] {
        if map.len() > 100 {
            return Err(AppError::invalid(format!(
                "`{field}` may hold at most 100 entries"
            )));
        }
        for (key, value) in map {
            let key_ok = !key.is_empty()
                && key.len() <= 64
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
            if !key_ok {
                return Err(AppError::invalid(format!(
                    "`{field}` keys are 1 to 64 letters, digits, `_`, `-` or `.`"
                )));
            }
            if field == "config" && key == crate::plugins::tls_pins::TLS_PINS_KEY {
                crate::plugins::tls_pins::pins_parse(value)
                    .map_err(|err| AppError::invalid(format!("`config.{key}`: {err}")))?;
            }
            // A stored secret is sealed (longer than its value, which was checked when set).
            if value.len() > 16 * 1024 && !SecretBox::is_sealed(value) {
                return Err(AppError::invalid(format!(
                    "`{field}.{key}` may be at most 16 KiB"
                )));
            }
        }
    }
    Ok(())
}

/// Refuses a secret from a request that looks sealed: stored values are told apart from new
/// ones by that form, so a client could otherwise skip the size check and store a value that
/// never opens (and breaks the provider's next load).
fn request_secrets_check<'a>(
    values: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> AppResult<()> {
    match values
        .into_iter()
        .find(|(_, value)| SecretBox::is_sealed(value))
    {
        Some((key, _)) => Err(AppError::invalid(format!(
            "`secrets.{key}` has the form of a sealed value; send the secret itself"
        ))),
        None => Ok(()),
    }
}

fn secret_purpose(provider: &str, key: &str) -> String {
    format!("provider-secret:{provider}:{key}")
}

/// Seals the values of `secrets` that are not sealed yet (the ones just set).
fn secrets_seal(
    sealer: &SecretBox,
    provider: &str,
    mut secrets: BTreeMap<String, String>,
) -> AppResult<serde_json::Value> {
    for (key, value) in secrets.iter_mut() {
        if !SecretBox::is_sealed(value) {
            *value = sealer.seal(&secret_purpose(provider, key), value);
        }
    }
    serde_json::to_value(&secrets).map_err(AppError::internal)
}

/// What a provider's plugin sees, from its stored record (its secrets opened).
pub(crate) fn plugin_env(row: &provider::Model, sealer: &SecretBox) -> AppResult<Arc<PluginEnv>> {
    // The listed patterns, and the configuration's endpoints as names only: a configured
    // URL never opens a loopback, private or metadata address (`plugins::outbound`).
    let listed: Vec<String> = serde_json::from_value(row.allowlist.clone()).unwrap_or_default();
    let config = json_map(&row.config);
    let allowlist = Allowlist::parse(&listed)
        .map_err(AppError::internal)?
        .with_endpoints(&config);
    let secrets = json_map(&row.secrets)
        .into_iter()
        .map(|(key, sealed)| {
            let value = sealer
                .open_value(&secret_purpose(&row.name, &key), &sealed)
                .map_err(|err| AppError::internal(format!("{err:#}")))?;
            Ok((key, value))
        })
        .collect::<AppResult<_>>()?;
    Ok(Arc::new(PluginEnv {
        provider: row.name.as_str().into(),
        config,
        secrets,
        allowlist: Arc::new(allowlist),
        // A new cache with every new set of settings: nothing cached under old credentials
        // survives a change.
        cache: Default::default(),
        connections: Default::default(),
    }))
}

/// The allowlist a provider's plugin runs with: the configured patterns and the endpoints
/// derived from its configuration.
fn allowlist_effective(row: &provider::Model) -> Vec<String> {
    let mut patterns: Vec<String> =
        serde_json::from_value(row.allowlist.clone()).unwrap_or_default();
    for derived in endpoint_patterns(&json_map(&row.config)) {
        if !patterns.contains(&derived) {
            patterns.push(derived);
        }
    }
    patterns
}

pub(crate) fn limits_of(row: &provider::Model) -> ProviderLimits {
    serde_json::from_value(row.limits.clone()).unwrap_or_default()
}

pub(crate) async fn provider_find(
    db: &impl ConnectionTrait,
    name: &str,
) -> AppResult<provider::Model> {
    provider::Entity::find_by_id(name.to_owned())
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("provider"))
}

pub(crate) fn provider_audit(
    action: &'static str,
    row: &provider::Model,
    details: serde_json::Value,
) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "provider",
        resource_id: row.name.clone(),
        project_id: None,
        details,
    }
}

impl App {
    /// Seals the provider secrets that an earlier version stored in plaintext; returns how
    /// many values it sealed.
    pub(crate) async fn provider_secrets_seal_plaintext(&self) -> AppResult<u64> {
        let mut sealed = 0;
        for row in provider::Entity::find().all(&self.db).await? {
            let secrets = json_map(&row.secrets);
            let plaintext = secrets
                .values()
                .filter(|v| !SecretBox::is_sealed(v))
                .count();
            if plaintext == 0 {
                continue;
            }
            provider::Entity::update_many()
                .col_expr(
                    provider::Column::Secrets,
                    sea_orm::sea_query::Expr::value(secrets_seal(
                        &self.secrets,
                        &row.name,
                        secrets,
                    )?),
                )
                .filter(provider::Column::Name.eq(&row.name))
                .filter(provider::Column::Revision.eq(row.revision))
                .exec(&self.db)
                .await?;
            sealed += plaintext as u64;
        }
        Ok(sealed)
    }

    pub async fn provider_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<ProviderView>> {
        principal.require_scope(Scope::Read)?;
        let page = paginate(
            &self.db,
            provider::Entity::find(),
            provider::Column::Name,
            |m| m.name.clone(),
            &params,
        )
        .await?;
        let digests: Vec<String> = page
            .items
            .iter()
            .filter_map(|row| row.plugin_digest.clone())
            .collect();
        let binaries: BTreeMap<String, plugin_binary::Model> = plugin_binary::Entity::find()
            .filter(plugin_binary::Column::Digest.is_in(digests))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|binary| (binary.digest.clone(), binary))
            .collect();
        let admin = principal.is_admin();
        Ok(page.map(|row| {
            let binary = row.plugin_digest.as_ref().and_then(|d| binaries.get(d));
            let view = self.provider_view_of(row.clone(), binary.cloned());
            if admin { view } else { view.public() }
        }))
    }

    pub async fn provider_view(
        &self,
        principal: &Principal,
        name: &str,
    ) -> AppResult<(i64, ProviderView)> {
        principal.require_scope(Scope::Read)?;
        let row = provider_find(&self.db, name).await?;
        let (revision, view) = self.provider_view_load(row).await?;
        Ok((
            revision,
            if principal.is_admin() {
                view
            } else {
                view.public()
            },
        ))
    }

    pub(crate) async fn provider_view_load(
        &self,
        row: provider::Model,
    ) -> AppResult<(i64, ProviderView)> {
        let binary = match &row.plugin_digest {
            Some(digest) => Some(plugin_binary_find(&self.db, digest).await?),
            None => None,
        };
        Ok((row.revision, self.provider_view_of(row, binary)))
    }

    fn provider_view_of(
        &self,
        row: provider::Model,
        binary: Option<plugin_binary::Model>,
    ) -> ProviderView {
        let slot = self.providers.slot(&row.name);
        let stats = &slot.stats;
        let limits = limits_of(&row);
        let mut secret_names: Vec<String> = json_map(&row.secrets).into_keys().collect();
        secret_names.sort();
        let effective_allowlist = allowlist_effective(&row);
        let has_plugin = row.plugin_digest.is_some();
        let health = row.health;
        let state = if !row.enabled {
            ProviderState::Disabled
        } else if !has_plugin {
            ProviderState::NoPlugin
        } else if row.drained {
            ProviderState::Drained
        } else {
            health.into()
        };
        let health_reason = if has_plugin {
            row.health_reason
        } else {
            "no plugin is activated on this provider: it takes no calls".into()
        };
        ProviderView {
            name: row.name.clone(),
            state,
            health: has_plugin.then_some(health),
            details: Some(ProviderDetails {
                health_reason,
                health_changed_at: row.health_changed_at,
                drained: row.drained,
                serving: slot.active().is_some(),
                enabled: row.enabled,
                plugin: binary.map(|binary| ProviderPluginView {
                    config: config_keys_of(&binary),
                    digest: binary.digest,
                    name: binary.name,
                    version: binary.version,
                    contract_version: binary.contract_version,
                }),
                previous_digest: row.previous_digest,
                config: json_map(&row.config),
                secret_names,
                effective_allowlist,
                allowlist: serde_json::from_value(row.allowlist).unwrap_or_default(),
                effective_limits: ProviderLimits::of(&limits.effective()),
                limits,
                calls: ProviderCallsView {
                    ok: stats.ok.load(Relaxed),
                    provider_errors: stats.provider_errors.load(Relaxed),
                    timeouts: stats.timeouts.load(Relaxed),
                    memory_exceeded: stats.memory_exceeded.load(Relaxed),
                    crashes: stats.traps.load(Relaxed),
                },
                created_at: row.created_at,
                updated_at: row.updated_at,
            }),
        }
    }

    pub async fn provider_create(
        &self,
        ctx: &OpContext,
        create: ProviderCreate,
    ) -> AppResult<(i64, ProviderView)> {
        ctx.principal.require_admin()?;
        let name = slug_validate("name", &create.name)?;
        request_secrets_check(&create.secrets)?;
        settings_validate(&create.config, &create.secrets)?;
        allowlist_validate(&create.allowlist)?;
        create.limits.validate()?;
        let txn = crate::db::begin_write(&self.db).await?;
        let now = Utc::now();
        let row = provider::ActiveModel {
            name: Set(name.clone()),
            plugin_digest: Set(None),
            previous_digest: Set(None),
            config: Set(serde_json::to_value(&create.config).map_err(AppError::internal)?),
            secrets: Set(secrets_seal(&self.secrets, &name, create.secrets.clone())?),
            allowlist: Set(serde_json::to_value(&create.allowlist).map_err(AppError::internal)?),
            limits: Set(serde_json::to_value(&create.limits).map_err(AppError::internal)?),
            enabled: Set(create.enabled),
            health: Set(ProviderHealth::Healthy),
            health_reason: Set(String::new()),
            health_changed_at: Set(None),
            drained: Set(false),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await
        .map_err(unique_violation_as(
            ErrorCode::ProviderExists,
            "a provider of this name exists",
        ))?;
        let details = serde_json::json!({
            "config_keys": create.config.keys().collect::<Vec<_>>(),
            "secret_names": create.secrets.keys().collect::<Vec<_>>(),
            "allowlist": create.allowlist,
            "enabled": create.enabled,
        });
        audit_record(&txn, ctx, provider_audit("provider.create", &row, details)).await?;
        txn.commit().await?;
        self.provider_view_load(row).await
    }

    /// Changes a provider's settings; a running plugin picks them up for its next calls.
    pub async fn provider_update(
        &self,
        ctx: &OpContext,
        name: &str,
        if_match: Option<&str>,
        update: ProviderUpdate,
    ) -> AppResult<(i64, ProviderView)> {
        ctx.principal.require_admin()?;
        let slot = self.providers.slot(name);
        let _changing = slot.changing.lock().await;
        let txn = crate::db::begin_write(&self.db).await?;
        let current = provider_find(&txn, name).await?;
        if_match_check(if_match, current.revision)?;
        let config = update
            .config
            .clone()
            .unwrap_or_else(|| json_map(&current.config));
        let mut secrets = json_map(&current.secrets);
        let given = update.secrets.clone().unwrap_or_default();
        request_secrets_check(
            given
                .iter()
                .filter_map(|(key, value)| Some((key, value.as_ref()?))),
        )?;
        for (key, value) in given {
            match value {
                Some(value) => secrets.insert(key, value),
                None => secrets.remove(&key),
            };
        }
        settings_validate(&config, &secrets)?;
        // The running plugin's declared configuration must stay complete.
        if (update.config.is_some() || update.secrets.is_some())
            && let Some(digest) = &current.plugin_digest
        {
            let binary = plugin_binary_find(&txn, digest).await?;
            config_missing_check(&binary.name, &config_keys_of(&binary), &config, &secrets)?;
        }
        let mut row: provider::ActiveModel = current.clone().into();
        if let Some(allowlist) = &update.allowlist {
            allowlist_validate(allowlist)?;
            row.allowlist = Set(serde_json::to_value(allowlist).map_err(AppError::internal)?);
        }
        if let Some(limits) = &update.limits {
            limits.validate()?;
            row.limits = Set(serde_json::to_value(limits).map_err(AppError::internal)?);
        }
        if let Some(enabled) = update.enabled {
            row.enabled = Set(enabled);
        }
        if let Some(drained) = update.drained {
            row.drained = Set(drained);
        }
        row.config = Set(serde_json::to_value(&config).map_err(AppError::internal)?);
        row.secrets = Set(secrets_seal(&self.secrets, name, secrets)?);
        row.revision = Set(current.revision + 1);
        row.updated_at = Set(Utc::now());
        let updated = row.update(&txn).await?;
        let details = serde_json::json!({
            "config_keys": update.config.as_ref().map(|c| c.keys().collect::<Vec<_>>()),
            "secrets_changed": update.secrets.as_ref().map(|s| s.keys().collect::<Vec<_>>()),
            "allowlist": update.allowlist,
            "limits": update.limits,
            "enabled": update.enabled,
            "drained": update.drained,
        });
        audit_record(
            &txn,
            ctx,
            provider_audit("provider.update", &updated, details),
        )
        .await?;
        // Load before committing: settings the plugin cannot run with are refused unchanged.
        let prepared = self.provider_prepare(&txn, &updated).await?;
        txn.commit().await?;
        match prepared {
            Some((plugin, env)) => slot.activate(plugin, env, updated.revision),
            None => slot.deactivate(updated.revision),
        }
        self.changes.providers.notify();
        self.health.probe_soon(name);
        self.provider_view_load(updated).await
    }
}
