//! The `webhook_messages` table: each event owed to an endpoint, and its delivery.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_messages")]
pub struct Model {
    /// Sent as `webhook-id: msg_<id without dashes>`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub event_type: String,
    /// The JSON body, exactly as signed and sent.
    pub payload: String,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    pub attempts: i32,
    pub next_attempt_at: DateTimeUtc,
    /// The HTTP status of the last attempt, if it got one.
    pub last_status: Option<i32>,
    pub last_error: String,
    pub created_at: DateTimeUtc,
    pub delivered_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
