//! The `data_keys` table: the keys that encrypt secrets at rest, each wrapped by the master
//! key (see [`crate::secrets`]).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "data_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// base64 of nonce ‖ ciphertext of the key under the master key.
    pub wrapped: String,
    /// The id (fingerprint) of the master key that wrapped it.
    pub master_key_id: String,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
