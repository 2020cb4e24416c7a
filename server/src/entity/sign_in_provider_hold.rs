//! The `sign_in_provider_holds` table: identity providers that asked to wait and have not
//! answered since (see `app::identity::sign_in::holds`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "sign_in_provider_holds")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub provider: String,
    /// No replica calls the provider before this.
    pub held_until: DateTimeUtc,
    /// The sign-in finding out whether the provider answers again, and until when its lease
    /// lasts.
    pub probe_id: Option<Uuid>,
    pub probe_until: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
