//! Contract 0.3.0 of provider plugins: the configuration a plugin declares (`config_keys` of
//! `plugin_binaries`, a JSON list taken from its `info` when it is stored; `[]` for binaries
//! stored before, and for 0.2.0 plugins, which declare nothing), and events of a provider
//! that are not health changes (`kind` of `provider_events`: `health`, or
//! `activation_refused` when a new version failed its health check).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("plugin_binaries")
                    .add_column(text("config_keys").default("[]"))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("provider_events")
                    .add_column(string_len("kind", 32).default("health"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("provider_events")
                    .drop_column("kind")
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("plugin_binaries")
                    .drop_column("config_keys")
                    .to_owned(),
            )
            .await
    }
}
