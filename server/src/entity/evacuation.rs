//! The `evacuations` table: moving every instance off a provider, make-before-break.

use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "evacuations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub provider: String,
    pub state: EvacuationState,
    /// Instances to move.
    pub total: i32,
    /// Instances replaced elsewhere so far.
    pub moved: i32,
    /// Keys of old instances that could not be removed at the provider (unreachable), as a
    /// JSON list.
    pub unremoved: Json,
    pub created_by: Option<Uuid>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub finished_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    EnumIter,
    DeriveActiveEnum,
    Serialize,
    Deserialize,
    ToSchema,
)]
#[sea_orm(
    rs_type = "String",
    db_type = "String(StringLen::None)",
    rename_all = "snake_case"
)]
/// The state of an evacuation.
#[serde(rename_all = "snake_case")]
pub enum EvacuationState {
    Running,
    Done,
    Cancelled,
}
