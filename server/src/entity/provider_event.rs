//! The `provider_events` table: every change of a provider's health, and why, and the
//! activations refused because the new version failed its health check.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::provider::ProviderHealth;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "provider_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub provider: String,
    pub kind: ProviderEventKind,
    pub from_health: ProviderHealth,
    pub to_health: ProviderHealth,
    pub reason: String,
    pub created_at: DateTimeUtc,
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
/// What a provider's event records.
#[serde(rename_all = "snake_case")]
pub enum ProviderEventKind {
    /// Its health changed.
    Health,
    /// A new version failed its health check and was not activated.
    ActivationRefused,
}
