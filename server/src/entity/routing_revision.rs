//! The `routing_revisions` table: one row per revision of the routing table, with what changed
//! from the revision before (the routes themselves are in `routes`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "routing_revisions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub revision: i64,
    /// What changed from the revision before, as a JSON list of `RouteChange`s.
    pub changes: String,
    /// Whether every route or upstream this revision drops was taken away on purpose.
    pub drop_intended: bool,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
