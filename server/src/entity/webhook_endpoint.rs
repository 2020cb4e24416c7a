//! The `webhook_endpoints` table: where a project's events are posted.

use sea_orm::entity::prelude::*;

use crate::ids::ProjectId;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub project_id: ProjectId,
    pub url: String,
    /// The event types it receives: `[type]`; empty: all.
    pub event_types: Json,
    /// The signing secret (`whsec_…`), sealed.
    pub secret: String,
    /// The secret before the last rotation (sealed); messages are signed with both until
    /// `previous_secret_until`.
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<DateTimeUtc>,
    /// Failed attempts in a row (the breaker opens at a threshold).
    pub failures: i32,
    /// While set and in the future, nothing is sent to it (its breaker is open).
    pub open_until: Option<DateTimeUtc>,
    pub created_by: Option<Uuid>,
    pub revision: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
