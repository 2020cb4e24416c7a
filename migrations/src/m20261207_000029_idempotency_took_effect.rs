//! Whether a request claimed with an idempotency key took effect: set by every write
//! transaction of that request, in that transaction, so that a request whose commit was
//! acknowledged by the database but whose answer was lost (a primary that died in between)
//! is never run a second time when its key is released.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("idempotency_records")
                    .add_column(boolean("took_effect").default(false))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("idempotency_records")
                    .drop_column("took_effect")
                    .to_owned(),
            )
            .await
    }
}
