//! Routing tables: each revision of the table edges route by (its routes while it is the
//! latest, and what changed from the one before, kept for a window of history), the Ed25519
//! keys that sign them (private halves sealed like every secret at rest), and the edges that
//! report which revision they applied.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("routing_revisions")
                    .col(big_integer("revision").primary_key())
                    .col(string_len("content_hash", 64))
                    .col(text("changes"))
                    .col(boolean("drop_intended").default(false))
                    .col(text_null("routes"))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("routing_keys")
                    .col(string_len("id", 32).primary_key())
                    .col(string_len("public_key", 64))
                    .col(text("private_key"))
                    .col(string_len("state", 16))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone_null("activated_at"))
                    .col(timestamp_with_time_zone_null("retired_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("edges")
                    .col(string_len("id", 63).primary_key())
                    .col(uuid("token_id"))
                    .col(big_integer("revision"))
                    .col(double_null("snapshot_age_seconds"))
                    .col(json_null("last_refusal"))
                    .col(string_len("agent_version", 64).default(""))
                    .col(timestamp_with_time_zone("first_seen_at"))
                    .col(timestamp_with_time_zone("reported_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(manager, &["edges", "routing_keys", "routing_revisions"]).await
    }
}
