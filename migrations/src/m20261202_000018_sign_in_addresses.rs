//! `sign_in_addresses`: the addresses each user signed in from, so that every replica, and a
//! restarted server, knows an account's usual addresses (exempt from the account-wide login
//! limit). An address is stored as a SHA-256 of the user and the address, never as such.

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
                    .table("sign_in_addresses")
                    .col(uuid("user_id"))
                    .col(string_len("address_hash", 64))
                    .col(timestamp_with_time_zone("signed_in_at"))
                    .primary_key(Index::create().col("user_id").col("address_hash"))
                    .foreign_key(&mut cascade_fk("sign_in_addresses", "user_id", "users"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(manager, &["sign_in_addresses"]).await
    }
}
