//! Plugin binaries: provider plugin components uploaded by administrators (or bundled with the
//! server), validated, and stored by SHA-256. Storing one makes it available to activate on a
//! provider (`app::providers`); it does not run it anywhere.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ConnectionTrait, EntityTrait, Set};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::authz::{OpContext, Principal};
use crate::entity::{plugin_binary, plugin_blob};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};
use crate::plugins::{ConfigKey, PluginEnv, PluginLimits};

/// The largest plugin binary accepted.
pub const PLUGIN_MAX_BYTES: usize = 32 * 1024 * 1024;

/// A configuration value or secret a plugin declares it reads (contract 0.3.0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConfigKeyView {
    pub name: String,
    /// The provider is refused (422) while a required one is missing.
    pub required: bool,
    /// Set with `secrets` (write-only) rather than `config`.
    pub secret: bool,
    pub description: String,
}

impl From<ConfigKey> for ConfigKeyView {
    fn from(key: ConfigKey) -> Self {
        Self {
            name: key.name,
            required: key.required,
            secret: key.secret,
            description: key.description,
        }
    }
}

/// The declared configuration stored with a binary (`[]` for 0.2.0 plugins and binaries
/// stored before 0.3.0).
pub fn config_keys_of(binary: &plugin_binary::Model) -> Vec<ConfigKeyView> {
    serde_json::from_str(&binary.config_keys).unwrap_or_default()
}

/// The required keys of `declared` that `config` and `secrets` lack (an empty value counts as
/// missing), as `config.NAME` or `secrets.NAME`.
pub fn config_missing(
    declared: &[ConfigKeyView],
    config: &std::collections::BTreeMap<String, String>,
    secrets: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    declared
        .iter()
        .filter(|key| key.required)
        .filter(|key| {
            let map = if key.secret { secrets } else { config };
            map.get(&key.name)
                .is_none_or(|value| value.trim().is_empty())
        })
        .map(|key| {
            let field = if key.secret { "secrets" } else { "config" };
            format!("{field}.{}", key.name)
        })
        .collect()
}

/// 422 naming the missing keys, or nothing.
pub fn config_missing_check(
    plugin: &str,
    declared: &[ConfigKeyView],
    config: &std::collections::BTreeMap<String, String>,
    secrets: &std::collections::BTreeMap<String, String>,
) -> AppResult<()> {
    let missing = config_missing(declared, config, secrets);
    if missing.is_empty() {
        return Ok(());
    }
    Err(AppError::new(
        ErrorCode::ConfigurationMissing,
        format!(
            "plugin `{plugin}` requires {}, which {} not set",
            missing.join(", "),
            if missing.len() == 1 { "is" } else { "are" }
        ),
    ))
}

/// Checks what a plugin declares: keys a provider could set, short descriptions.
fn config_keys_validate(keys: &[ConfigKey]) -> AppResult<()> {
    if keys.len() > 100 {
        return Err(AppError::new(
            ErrorCode::PluginRejected,
            "plugin rejected: it declares more than 100 configuration keys",
        ));
    }
    for key in keys {
        let name_ok = !key.name.is_empty()
            && key.name.len() <= 64
            && key
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !name_ok || key.description.chars().count() > 500 {
            return Err(AppError::new(
                ErrorCode::PluginRejected,
                format!(
                    "plugin rejected: declared configuration key `{}` is not 1 to 64 letters, digits, `_`, `-` or `.` with a description of at most 500 characters",
                    key.name.chars().take(80).collect::<String>()
                ),
            ));
        }
    }
    Ok(())
}

/// A stored plugin binary.
#[derive(Debug, Serialize, ToSchema)]
pub struct PluginBinaryView {
    /// Hex SHA-256 of the component: its identity.
    pub digest: String,
    /// The plugin's own name and version (from its `info`).
    pub name: String,
    pub version: String,
    /// The `bulkhead:provider` contract version it was built for.
    pub contract_version: String,
    pub size: i64,
    /// The configuration values and secrets it declares (none for 0.2.0 plugins).
    pub config: Vec<ConfigKeyView>,
    /// The administrator who uploaded it; absent for bundled plugins.
    pub uploaded_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<plugin_binary::Model> for PluginBinaryView {
    fn from(m: plugin_binary::Model) -> Self {
        Self {
            config: config_keys_of(&m),
            digest: m.digest,
            name: m.name,
            version: m.version,
            contract_version: m.contract_version,
            size: m.size,
            uploaded_by: m.uploaded_by,
            created_at: m.created_at,
        }
    }
}

/// Checks that `digest` looks like a hex SHA-256 (so a bad path is 400, not a 404 lookup).
pub fn digest_validate(digest: &str) -> AppResult<String> {
    let digest = digest.to_ascii_lowercase();
    if digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(digest)
    } else {
        Err(AppError::invalid(
            "a plugin digest is the 64 hex digits of its SHA-256",
        ))
    }
}

pub(crate) async fn plugin_binary_find(
    db: &impl ConnectionTrait,
    digest: &str,
) -> AppResult<plugin_binary::Model> {
    plugin_binary::Entity::find_by_id(digest.to_owned())
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("plugin binary"))
}

pub(crate) async fn plugin_wasm(db: &impl ConnectionTrait, digest: &str) -> AppResult<Vec<u8>> {
    plugin_blob::Entity::find_by_id(digest.to_owned())
        .one(db)
        .await?
        .map(|blob| blob.wasm)
        .ok_or_else(|| AppError::not_found("plugin binary"))
}

/// Whether a newly stored binary was new.
pub enum Stored {
    Created(plugin_binary::Model),
    AlreadyStored(plugin_binary::Model),
}

impl App {
    pub async fn plugin_binary_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<plugin_binary::Model>> {
        principal.require_admin()?;
        let select = plugin_binary::Entity::find();
        paginate(
            &self.db,
            select,
            plugin_binary::Column::Digest,
            |m| m.digest.clone(),
            &params,
        )
        .await
    }

    pub async fn plugin_binary_view(
        &self,
        principal: &Principal,
        digest: &str,
    ) -> AppResult<plugin_binary::Model> {
        principal.require_admin()?;
        plugin_binary_find(&self.db, &digest_validate(digest)?).await
    }

    /// Validates and stores an uploaded component. Uploading a stored binary again changes
    /// nothing and answers with the stored one.
    pub async fn plugin_binary_upload(&self, ctx: &OpContext, wasm: &[u8]) -> AppResult<Stored> {
        ctx.principal.require_admin()?;
        let stored = self.plugin_binary_store(wasm, Some(ctx)).await?;
        if let Stored::Created(binary) = &stored {
            tracing::info!(digest = %binary.digest, name = %binary.name, version = %binary.version, "plugin binary uploaded");
        }
        Ok(stored)
    }

    /// Validates `wasm` (a component of a supported contract whose `info` answers) and stores
    /// it, audited as `ctx` (none for bundled plugins).
    pub(crate) async fn plugin_binary_store(
        &self,
        wasm: &[u8],
        ctx: Option<&OpContext>,
    ) -> AppResult<Stored> {
        if wasm.len() > PLUGIN_MAX_BYTES {
            return Err(AppError::new(
                ErrorCode::BodyTooLarge,
                format!("a plugin binary may be at most {PLUGIN_MAX_BYTES} bytes"),
            ));
        }
        // A stored binary was validated when it was stored: not again (at every start-up, for
        // the bundled ones).
        let digest = hex::encode(sha2::Sha256::digest(wasm));
        if let Some(existing) = plugin_binary::Entity::find_by_id(digest)
            .one(&self.db)
            .await?
        {
            return Ok(Stored::AlreadyStored(existing));
        }
        let host = &self.providers.host;
        let plugin = host
            .plugin_load(wasm, PluginLimits::default())
            .map_err(|rejection| {
                AppError::new(
                    ErrorCode::PluginRejected,
                    format!("plugin rejected: {rejection}"),
                )
            })?;
        let env = Arc::new(PluginEnv {
            provider: "upload".into(),
            ..Default::default()
        });
        let info = host.plugin_info(&plugin, &env).await.map_err(|err| {
            AppError::new(
                ErrorCode::PluginRejected,
                format!("plugin rejected: its `info` call failed: {err}"),
            )
        })?;
        let name = crate::app::shared::validate::slug_validate("info.name", &info.name)
            .map_err(|err| err.with_code(ErrorCode::PluginRejected))?;
        let version =
            crate::app::shared::validate::text_validate("info.version", &info.version, 64)
                .map_err(|err| err.with_code(ErrorCode::PluginRejected))?;
        config_keys_validate(&info.config)?;
        let config_keys: Vec<ConfigKeyView> = info.config.into_iter().map(Into::into).collect();
        let config_keys = serde_json::to_string(&config_keys).map_err(AppError::internal)?;

        let txn = crate::db::begin_write(&self.db).await?;
        if let Some(existing) = plugin_binary::Entity::find_by_id(plugin.digest.clone())
            .one(&txn)
            .await?
        {
            return Ok(Stored::AlreadyStored(existing));
        }
        let binary = plugin_binary::ActiveModel {
            digest: Set(plugin.digest.clone()),
            name: Set(name),
            version: Set(version),
            contract_version: Set(plugin.contract_version.clone()),
            config_keys: Set(config_keys),
            size: Set(wasm.len() as i64),
            uploaded_by: Set(ctx.map(|ctx| ctx.principal.user_id())),
            created_at: Set(Utc::now()),
        }
        .insert(&txn)
        .await
        .map_err(unique_violation_as(
            ErrorCode::PluginExists,
            "this binary was stored by a concurrent upload",
        ))?;
        plugin_blob::ActiveModel {
            digest: Set(plugin.digest.clone()),
            wasm: Set(wasm.to_vec()),
        }
        .insert(&txn)
        .await?;
        if let Some(ctx) = ctx {
            audit_record(
                &txn,
                ctx,
                AuditEntry {
                    action: "plugin.upload",
                    resource_type: "plugin",
                    resource_id: binary.digest.clone(),
                    project_id: None,
                    details: serde_json::json!({
                        "name": binary.name,
                        "version": binary.version,
                        "contract_version": binary.contract_version,
                        "size": binary.size,
                    }),
                },
            )
            .await?;
        }
        txn.commit().await?;
        Ok(Stored::Created(binary))
    }
}
