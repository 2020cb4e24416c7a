//! Provider health: each provider's stored health (`healthy`, `degraded`, `unavailable`, as
//! its circuit breaker last decided), the operator's `drained` flag (no new work, existing
//! instances kept), and the list of health changes (`provider_events`).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite alters one column at a time.
        let columns = [
            string_len("health", 16).default("healthy").to_owned(),
            text("health_reason").default("").to_owned(),
            timestamp_with_time_zone_null("health_changed_at"),
            boolean("drained").default(false).to_owned(),
        ];
        for column in columns {
            manager
                .alter_table(
                    Table::alter()
                        .table("providers")
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_table(
                Table::create()
                    .table("provider_events")
                    .col(pk_uuid("id"))
                    .col(string_len("provider", 63))
                    .col(string_len("from_health", 16))
                    .col(string_len("to_health", 16))
                    .col(text("reason"))
                    .col(timestamp_with_time_zone("created_at"))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_provider_events_provider")
                            .from("provider_events", "provider")
                            .to("providers", "name")
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_provider_events_provider")
                    .table("provider_events")
                    .col("provider")
                    .col("id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(manager, &["provider_events"]).await?;
        for column in ["drained", "health_changed_at", "health_reason", "health"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("providers")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
