//! The plugin registry: provider plugin binaries stored by SHA-256 (metadata in
//! `plugin_binaries`, bytes in `plugin_blobs`), the configured providers
//! that run them, and each provider's activation history (what ran when, for rollback).
//!
//! A provider's `config`, `allowlist` and `limits` are JSON documents read and written whole
//! with it; `secrets` too, and they are never returned by the API.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("plugin_binaries")
                    .col(string_len("digest", 64).primary_key())
                    .col(string_len("name", 63))
                    .col(string_len("version", 64))
                    .col(string_len("contract_version", 32))
                    .col(big_integer("size"))
                    .col(uuid_null("uploaded_by"))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await?;
        // The bytes apart, so that listing binaries never reads them.
        manager
            .create_table(
                Table::create()
                    .table("plugin_blobs")
                    .col(string_len("digest", 64).primary_key())
                    .col(blob("wasm"))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_plugin_blobs_digest")
                            .from("plugin_blobs", "digest")
                            .to("plugin_binaries", "digest")
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("providers")
                    .col(string_len("name", 63).primary_key())
                    .col(string_len_null("plugin_digest", 64))
                    .col(string_len_null("previous_digest", 64))
                    .col(json("config"))
                    .col(json("secrets"))
                    .col(json("allowlist"))
                    .col(json("limits"))
                    .col(boolean("enabled"))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut digest_fk("providers", "plugin_digest"))
                    .foreign_key(&mut digest_fk("providers", "previous_digest"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("provider_activations")
                    .col(pk_uuid("id"))
                    .col(string_len("provider", 63))
                    .col(string_len("digest", 64))
                    .col(string_len("action", 16))
                    .col(uuid_null("actor_user_id"))
                    .col(timestamp_with_time_zone("created_at"))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_provider_activations_provider")
                            .from("provider_activations", "provider")
                            .to("providers", "name")
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(&mut digest_fk("provider_activations", "digest"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_provider_activations_provider")
                    .table("provider_activations")
                    .col("provider")
                    .col("id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(
            manager,
            &[
                "provider_activations",
                "providers",
                "plugin_blobs",
                "plugin_binaries",
            ],
        )
        .await
    }
}

/// A reference to a stored plugin binary, which cannot be deleted while referenced.
fn digest_fk(table: &'static str, column: &'static str) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(format!("fk_{table}_{column}"))
        .from(table, column)
        .to("plugin_binaries", "digest")
        .on_delete(ForeignKeyAction::Restrict)
        .to_owned()
}
