//! The `edges` table: each edge agent and the routing-table revision it last reported.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "edges")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The API token the edge reports with; another token may not report as this edge.
    pub token_id: Uuid,
    pub revision: i64,
    pub snapshot_age_seconds: Option<f64>,
    /// The last snapshot the edge refused: `{ "revision": …, "reason": … }`.
    pub last_refusal: Option<Json>,
    pub agent_version: String,
    /// The certificates the edge serves with: `[{ "hostname", "issuer", "not_after",
    /// "last_error" }]`, `None` for an edge that serves plain HTTP.
    pub certificates: Option<Json>,
    pub first_seen_at: DateTimeUtc,
    pub reported_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
