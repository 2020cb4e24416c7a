//! The `idempotency_records` table.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "idempotency_records")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub principal: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    pub request_hash: String,
    pub response_status: Option<i32>,
    pub response_headers: Option<Json>,
    pub response_body: Option<Vec<u8>>,
    pub created_at: DateTimeUtc,
    /// The authorization checks the first request passed; a replay must pass them again.
    pub authorization: Option<Json>,
    /// Whether a write transaction of the first request committed (set in that transaction):
    /// such a request never runs again, even when its answer was lost.
    pub took_effect: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
