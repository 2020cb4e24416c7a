//! The `git_installations` table: a project's installation of a forge's push webhook.

use sea_orm::entity::prelude::*;

use crate::ids::ProjectId;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "git_installations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub project_id: ProjectId,
    /// `github`.
    pub forge: String,
    /// The webhook secret, sealed ([`crate::secrets`]).
    pub secret: String,
    /// The secret before the last rotation (sealed), still accepted until
    /// `previous_secret_until`.
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<DateTimeUtc>,
    /// Which pushes deploy which service: `[{repository, branch, service_id}]`.
    pub bindings: Json,
    /// The forge's API (`https://api.github.com`) commit statuses go to; none: no statuses.
    pub status_api_url: Option<String>,
    /// The token of those calls, sealed.
    pub status_token: Option<String>,
    pub created_by: Option<Uuid>,
    pub revision: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
