//! The deploy queue as indexes that keep a pass's cost at what it does, not at what is queued:
//!
//! - `instances.dispatch_order`: the order in which instances waiting for a provider operation
//!   get one. Each project's instances take consecutive orders from the head of the queue on
//!   (start-time fair queuing), so one project's thousand queued instances delay another
//!   project's single one by one turn, not by a thousand.
//! - `idx_instances_due` (partial: the states that wait for an operation) on
//!   `(dispatch_order, created_at)`: a pass reads the head of the queue, as far as it has room
//!   for, in order; `idx_instances_project_due` (the same rows, by project) finds the end of a
//!   project's queue.
//! - `idx_instances_deployment`: a deployment's instances (placement, settling, streams) are
//!   found without reading every instance.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::INSTANCES_DUE as DUE_STATES;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("instances")
                    .add_column(big_integer("dispatch_order").default(0))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared(&format!(
            "CREATE INDEX idx_instances_due ON instances (dispatch_order, created_at) WHERE {DUE_STATES}"
        ))
        .await?;
        db.execute_unprepared(&format!(
            "CREATE INDEX idx_instances_project_due ON instances (project_id, dispatch_order) WHERE {DUE_STATES}"
        ))
        .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_instances_deployment")
                    .table("instances")
                    .col("deployment_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for index in [
            "idx_instances_deployment",
            "idx_instances_project_due",
            "idx_instances_due",
        ] {
            manager
                .drop_index(Index::drop().name(index).table("instances").to_owned())
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table("instances")
                    .drop_column("dispatch_order")
                    .to_owned(),
            )
            .await
    }
}
