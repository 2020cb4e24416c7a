//! The `providers` table: configured providers and the plugin each one runs.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
    /// What its circuit breaker last decided.
    pub health: ProviderHealth,
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

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    EnumIter,
    DeriveActiveEnum,
    Serialize,
    Deserialize,
    ToSchema,
)]
#[sea_orm(
    rs_type = "String",
    db_type = "String(StringLen::None)",
    rename_all = "snake_case"
)]
/// The health of a provider's API, as the breaker sees it.
#[serde(rename_all = "snake_case")]
pub enum ProviderHealth {
    Healthy,
    Degraded,
    Unavailable,
}

impl ProviderHealth {
    pub const ALL: [Self; 3] = [Self::Healthy, Self::Degraded, Self::Unavailable];

    /// The name stored and shown (a label in `/metrics`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Unavailable => "unavailable",
        }
    }
}

impl std::fmt::Display for ProviderHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
