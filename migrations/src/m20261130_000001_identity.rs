//! Users, their credentials (API tokens, refresh tokens) and the JWT signing keys.

use crate::cascade_fk;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("users")
                    .col(pk_uuid("id"))
                    .col(string_len_uniq("email", 320))
                    .col(string_len("name", 200))
                    .col(text_null("password_hash"))
                    .col(boolean("is_admin"))
                    .col(boolean("disabled"))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("api_tokens")
                    .col(pk_uuid("id"))
                    .col(uuid("user_id"))
                    .col(string_len("name", 200))
                    .col(string_len_uniq("token_hash", 64))
                    .col(string_len("prefix", 16))
                    .col(json("scopes"))
                    .col(timestamp_with_time_zone_null("expires_at"))
                    .col(timestamp_with_time_zone_null("revoked_at"))
                    .col(timestamp_with_time_zone_null("last_used_at"))
                    .col(timestamp_with_time_zone("created_at"))
                    .foreign_key(&mut cascade_fk("api_tokens", "user_id", "users"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("refresh_tokens")
                    .col(pk_uuid("id"))
                    .col(uuid("user_id"))
                    .col(uuid("family_id"))
                    .col(string_len_uniq("token_hash", 64))
                    .col(timestamp_with_time_zone("expires_at"))
                    .col(timestamp_with_time_zone_null("used_at"))
                    .col(timestamp_with_time_zone_null("revoked_at"))
                    .col(timestamp_with_time_zone("created_at"))
                    .foreign_key(&mut cascade_fk("refresh_tokens", "user_id", "users"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_refresh_tokens_family")
                    .table("refresh_tokens")
                    .col("family_id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("signing_keys")
                    .col(string_len("id", 64).primary_key())
                    .col(string_len("algorithm", 16))
                    .col(text("private_key_pem"))
                    .col(text("public_key_pem"))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(
            manager,
            &["signing_keys", "refresh_tokens", "api_tokens", "users"],
        )
        .await
    }
}
