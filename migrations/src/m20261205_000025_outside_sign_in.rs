//! Sign-in through an outside identity provider (OAuth 2.0 / OpenID Connect, GitHub's OAuth
//! as one configuration): the identities users linked, unique per provider and subject, and
//! the sign-ins under way (the `state` sent to the provider with its PKCE verifier, usable
//! once, for ten minutes).

use crate::{cascade_fk, drop_tables};
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("user_identities")
                    .col(pk_uuid("id"))
                    .col(uuid("user_id"))
                    .col(string_len("provider", 64))
                    .col(string_len("subject", 255))
                    .col(string_len("login", 255))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone_null("last_used_at"))
                    .foreign_key(&mut cascade_fk("user_identities", "user_id", "users"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_user_identities_subject")
                    .table("user_identities")
                    .col("provider")
                    .col("subject")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_user_identities_user")
                    .table("user_identities")
                    .col("user_id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("sign_in_states")
                    .col(string_len("state_hash", 64).primary_key())
                    .col(string_len("provider", 64))
                    .col(text("code_verifier"))
                    .col(uuid_null("link_user_id"))
                    .col(timestamp_with_time_zone("expires_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop_tables(manager, &["sign_in_states", "user_identities"]).await
    }
}
