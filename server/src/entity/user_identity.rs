//! The `user_identities` table: an account at an outside identity provider, linked to a user.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "user_identities")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub user_id: Uuid,
    /// The provider's name in the configuration.
    pub provider: String,
    /// The provider's stable id of the account (GitHub's numeric id, OpenID Connect's `sub`).
    pub subject: String,
    /// What the provider calls the account (a login or an email), for people.
    pub login: String,
    pub created_at: DateTimeUtc,
    pub last_used_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
