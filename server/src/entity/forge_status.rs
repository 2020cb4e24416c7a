//! The `forge_statuses` table: the commit status owed to the forge for a deployment made from
//! a push (an outbox row; the state to send is the deployment's).

use sea_orm::entity::prelude::*;

use crate::ids::DeploymentId;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "forge_statuses")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub deployment_id: DeploymentId,
    pub installation_id: Uuid,
    pub repository: String,
    pub commit_sha: String,
    /// The last state the forge accepted: `pending`, `success`, `failure` or `error`.
    pub sent_state: Option<String>,
    /// A final state was sent, or the forge refused the status for good.
    pub done: bool,
    /// Failed attempts since the last success.
    pub attempts: i32,
    pub next_attempt_at: DateTimeUtc,
    pub last_error: String,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
