//! The `routing_keys` table: the Ed25519 keys that sign routing tables.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "routing_keys")]
pub struct Model {
    /// The first 16 hex digits of the SHA-256 of the public key.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The 32-byte public key, base64.
    pub public_key: String,
    /// The 32-byte seed, sealed (see `crate::secrets`).
    pub private_key: String,
    pub state: RoutingKeyState,
    pub created_at: DateTimeUtc,
    pub activated_at: Option<DateTimeUtc>,
    pub retired_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// A routing key's state. (Keys are published with it as a string, `bulkhead_routing`'s
/// `PublishedKey::state`, so that an edge reads a state it does not know yet.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, serde::Serialize)]
#[sea_orm(
    rs_type = "String",
    db_type = "String(StringLen::None)",
    rename_all = "snake_case"
)]
#[serde(rename_all = "snake_case")]
pub enum RoutingKeyState {
    /// Published ahead of use: edges trust it before it signs.
    Next,
    /// Signs new snapshots.
    Active,
    /// Signed earlier snapshots, which edges may still hold.
    Retired,
}
