//! The `deployments` table: one deployment of a service's spec, and where it is in its life.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "deployments")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub project_id: Uuid,
    pub service_id: Uuid,
    /// 1, 2, ... per service.
    pub number: i64,
    /// The service's spec when the deployment was made (secret values sealed).
    pub spec: Json,
    /// `queued`, `placing`, `rolling_out`, `healthy`, `failed`, `cancelled` or `superseded`.
    pub state: String,
    /// Why it is in its state (for `failed`, `cancelled`, `superseded`).
    pub reason: String,
    /// The deployment whose spec this one deploys again (a rollback).
    pub rollback_of: Option<Uuid>,
    pub cancel_requested: bool,
    pub created_by: Option<Uuid>,
    /// The sequence number of its last event.
    pub event_seq: i64,
    pub revision: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub finished_at: Option<DateTimeUtc>,
    /// When all its instances first were healthy (a rollback goes back to such a deployment).
    pub healthy_at: Option<DateTimeUtc>,
    /// The push it was made from (`app::deploys::deployments::DeploymentPush`), if one.
    pub push: Option<Json>,
    /// The delivery (`git_deliveries.id`) it was made from: unique with the service.
    pub push_delivery_id: Option<Uuid>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
