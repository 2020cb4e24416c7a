//! The `routes` table: the current route of each domain in the routing table, as of the latest
//! revision (a revision writes the routes it changes, and deletes those it removes).

use sea_orm::entity::prelude::*;

use crate::ids::ServiceId;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "routes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub domain: String,
    pub service_id: ServiceId,
    /// The revision that set it.
    pub revision: i64,
    /// The route (`bulkhead_routing::Route`) as JSON.
    pub route: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
