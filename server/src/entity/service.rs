//! The `services` table.

use sea_orm::entity::prelude::*;

use crate::ids::{EnvironmentId, ProjectId, ServiceId};

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "services")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: ServiceId,
    pub project_id: ProjectId,
    pub environment_id: EnvironmentId,
    pub name: String,
    pub source: Json,
    pub port: i32,
    pub replicas: i32,
    pub regions: Json,
    pub variables: Json,
    /// Where its instances may run (`app::deploys::placement`); none: the default policy.
    pub placement: Option<Json>,
    /// How the control plane checks its workload; none: the default check.
    pub health_check: Option<Json>,
    /// What each of its instances is given (`ServiceSize`); none: the operator's default.
    pub size: Option<Json>,
    pub revision: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
