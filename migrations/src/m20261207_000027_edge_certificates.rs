//! The certificates each edge reports with its revision: hostname, issuer, expiry and last
//! error of every domain it serves over HTTPS.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("edges")
                    .add_column(json_null("certificates"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("edges")
                    .drop_column("certificates")
                    .to_owned(),
            )
            .await
    }
}
