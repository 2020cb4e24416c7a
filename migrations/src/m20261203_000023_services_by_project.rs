//! `idx_services_project`: a project's services are listed in pages ordered by id; without an
//! index SQLite read and sorted every service of the project for each page (a page of 50 took
//! 2.0 ms at 500 services and 6.5 ms at 5,000, `benches/scale.rs`). With it a page costs what
//! it holds.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const INDEX: &str = "idx_services_project";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table("services")
                    .col("project_id")
                    .col("id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name(INDEX).table("services").to_owned())
            .await
    }
}
