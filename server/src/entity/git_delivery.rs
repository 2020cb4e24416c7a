//! The `git_deliveries` table: the pushes an installation received, in the order received.

use sea_orm::entity::prelude::*;

use crate::ids::ProjectId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "git_deliveries")]
pub struct Model {
    /// Ours (a UUIDv7: the order received).
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub installation_id: Uuid,
    pub project_id: ProjectId,
    /// The forge's id of the delivery (`X-GitHub-Delivery`).
    pub delivery_id: String,
    /// SHA-256 of the signed body, hex.
    pub payload_digest: String,
    /// `owner/name`.
    pub repository: String,
    pub branch: String,
    /// The commit the branch points to after the push.
    pub commit_sha: String,
    /// The first line of the head commit's message (at most 200 characters).
    pub commit_message: String,
    pub pusher: String,
    pub pushed_at: DateTimeUtc,
    pub received_at: DateTimeUtc,
    pub state: GitDeliveryState,
    pub reason: String,
    /// The deployments made from it: `[uuid]`.
    pub deployment_ids: Json,
    pub processed_at: Option<DateTimeUtc>,
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
/// Where a delivery is.
#[serde(rename_all = "snake_case")]
pub enum GitDeliveryState {
    /// Stored; deploys when the pipeline takes it (not while it is paused).
    Queued,
    /// Its deployments were made (`deployment_ids`).
    Deployed,
    /// It deploys nothing (`reason` says why: not a branch, no binding, an older push).
    Ignored,
    /// Making its deployments failed (`reason`); it is not tried again.
    Failed,
}
