//! The `sign_in_addresses` table: where each user last signed in from, hashed.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "sign_in_addresses")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub user_id: Uuid,
    /// SHA-256 (hex) of the user id and the address.
    #[sea_orm(primary_key, auto_increment = false)]
    pub address_hash: String,
    pub signed_in_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
