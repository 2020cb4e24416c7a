//! What a credential derives from, so that revoking one revokes what it made:
//! - `api_tokens.parent_token_id`: the token that minted this one (none for a session's);
//! - `users.session_epoch`: raised when a password changes or a user is disabled; access
//!   tokens carry the epoch they were issued in and are refused after it moves on;
//! - `idempotency_records.authorization`: the checks the first request passed, which a replay
//!   must pass again.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("api_tokens")
                    .add_column(uuid_null("parent_token_id"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_api_tokens_parent")
                    .table("api_tokens")
                    .col("parent_token_id")
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("users")
                    .add_column(big_integer("session_epoch").default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("idempotency_records")
                    .add_column(json_null("authorization"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("idempotency_records")
                    .drop_column("authorization")
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("users")
                    .drop_column("session_epoch")
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("idx_api_tokens_parent")
                    .table("api_tokens")
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("api_tokens")
                    .drop_column("parent_token_id")
                    .to_owned(),
            )
            .await
    }
}
