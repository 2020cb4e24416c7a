//! The `domains` table.

use sea_orm::entity::prelude::*;

use crate::ids::{ProjectId, ServiceId};

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "domains")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub project_id: ProjectId,
    pub service_id: ServiceId,
    /// Unique per project, and among verified domains.
    pub hostname: String,
    /// What the project publishes to prove it controls the hostname (none for domains made
    /// before verification existed).
    pub verification_token: Option<String>,
    /// When the project proved it; only verified domains route.
    pub verified_at: Option<DateTimeUtc>,
    pub revision: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
