//! The waits identity providers asked for, shared by the replicas: one row per provider that
//! answered 429, a 5xx or a limit (or did not answer) and has not answered since, with when
//! its wait ends and the lease of the one sign-in finding out whether it answers again.

use crate::drop_tables;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("sign_in_provider_holds")
                    .col(string_len("provider", 64).primary_key())
                    .col(timestamp_with_time_zone("held_until"))
                    .col(uuid_null("probe_id"))
                    .col(timestamp_with_time_zone_null("probe_until"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_tables(manager, &["sign_in_provider_holds"]).await
    }
}
