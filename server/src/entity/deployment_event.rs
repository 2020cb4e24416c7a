//! The `deployment_events` table: what happened to a deployment, numbered from 1.

use sea_orm::entity::prelude::*;

use crate::ids::DeploymentId;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "deployment_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub deployment_id: DeploymentId,
    #[sea_orm(primary_key, auto_increment = false)]
    pub seq: i64,
    pub kind: String,
    pub message: String,
    pub details: Json,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
