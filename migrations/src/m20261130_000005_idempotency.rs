//! Stored responses of requests made with an `Idempotency-Key`.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("idempotency_records")
                    .col(string_len("principal", 64))
                    .col(string_len("key", 255))
                    .col(string_len("request_hash", 64))
                    .col(integer_null("response_status"))
                    .col(json_null("response_headers"))
                    .col(blob_null("response_body"))
                    .col(timestamp_with_time_zone("created_at"))
                    .primary_key(Index::create().col("principal").col("key"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(manager, &["idempotency_records"]).await
    }
}
