//! The `sign_in_states` table: sign-ins through an outside provider under way.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "sign_in_states")]
pub struct Model {
    /// SHA-256 (hex) of the `state` sent to the provider.
    #[sea_orm(primary_key, auto_increment = false)]
    pub state_hash: String,
    pub provider: String,
    /// The PKCE verifier, sealed.
    pub code_verifier: String,
    /// The user linking an identity; none: a sign-in.
    pub link_user_id: Option<Uuid>,
    pub expires_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
