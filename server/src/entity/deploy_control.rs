//! The `deploy_controls` table: one row (id 1), the operator's controls of the deploy
//! pipeline.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "deploy_controls")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i32,
    /// No new provider operation starts while paused (those in flight finish).
    pub paused: bool,
    /// Provider operations started per second at most, across providers; 0: no limit.
    pub drain_rate: f64,
    pub reason: String,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
