//! The `plugin_binaries` table: provider plugin components, by SHA-256.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "plugin_binaries")]
pub struct Model {
    /// Hex SHA-256 of `wasm`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub digest: String,
    /// The plugin's own name and version, from its `info`.
    pub name: String,
    pub version: String,
    pub contract_version: String,
    /// The configuration the plugin declares (JSON list of `ConfigKeyView`).
    pub config_keys: String,
    pub size: i64,
    pub uploaded_by: Option<Uuid>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
