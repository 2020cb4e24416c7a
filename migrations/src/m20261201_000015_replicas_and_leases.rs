//! Replicas and leases: each `bulkhead serve` process sharing the database announces itself
//! and its heartbeat (for `GET /v1/status`), and each kind of background work has one lease row
//! naming the replica that leads it, until when (milliseconds of the database's clock), and its
//! term: a number raised at every change of leader, which that work's writes check (a fencing
//! token), so that a replica that lost the lease cannot act.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("leases")
                    .col(string_len("kind", 32).primary_key())
                    .col(string_len("holder", 64))
                    .col(big_integer("term"))
                    .col(big_integer("expires_at_ms"))
                    .col(big_integer("acquired_at_ms"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("replicas")
                    .col(string_len("id", 64).primary_key())
                    .col(string_len("address", 255))
                    .col(string_len("version", 64))
                    .col(big_integer("started_at_ms"))
                    .col(big_integer("heartbeat_at_ms"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(manager, &["replicas", "leases"]).await
    }
}
