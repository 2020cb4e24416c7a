//! `api_tokens.session_id`: the session (refresh-token family) whose access token minted the
//! token, none for a token minted by a token. When that session is caught reusing a refresh
//! token (the sign of a stolen session), what it minted is revoked with it.

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
                    .add_column(uuid_null("session_id"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_api_tokens_session")
                    .table("api_tokens")
                    .col("session_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_api_tokens_session")
                    .table("api_tokens")
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("api_tokens")
                    .drop_column("session_id")
                    .to_owned(),
            )
            .await
    }
}
