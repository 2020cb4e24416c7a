//! `idx_instances_health`: the reconciler looks for running instances that have been unhealthy
//! for a while on every pass (to replace them), and the unhealthy ones are few: found by this
//! index, the look costs what they number, not what all running instances number.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const INDEX: &str = "idx_instances_health";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table("instances")
                    .col("health")
                    .col("state")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name(INDEX).table("instances").to_owned())
            .await
    }
}
