//! The `providers` table: configured providers and the plugin each one runs.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "providers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    /// The active plugin binary, once one was activated.
    pub plugin_digest: Option<String>,
    /// The binary active before the last activation: what a rollback returns to.
    pub previous_digest: Option<String>,
    /// `{"key": "value"}`.
    pub config: Json,
    /// `{"key": "value"}`; never returned by the API.
    pub secrets: Json,
    /// `["host:port", ...]`.
    pub allowlist: Json,
    /// Overrides of the default plugin limits (`ProviderLimits`).
    pub limits: Json,
    pub enabled: bool,
    /// `healthy`, `degraded` or `unavailable`: what its circuit breaker last decided.
    pub health: String,
    /// Why it last changed.
    pub health_reason: String,
    pub health_changed_at: Option<DateTimeUtc>,
    /// Drained by an operator: no new instances; existing ones are kept.
    pub drained: bool,
    pub revision: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
