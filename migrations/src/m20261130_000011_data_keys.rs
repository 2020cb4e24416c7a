//! Data keys for secrets at rest, each wrapped by a master key kept outside the database.
//! The values they encrypt are sealed in place (service secret variables, provider secrets,
//! signing keys) by the server at start-up, since only it holds the master key; this
//! migration also drops the idempotency records stored before replays were bound to a
//! credential (their plaintext bodies may hold token secrets, and no credential can replay
//! them any more).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("data_keys")
                    .col(pk_uuid("id"))
                    .col(text("wrapped"))
                    .col(string_len("master_key_id", 32))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .get_connection()
            .execute_unprepared("DELETE FROM idempotency_records")
            .await
            .map(drop)
    }

    /// Refused once a data key exists: dropping the keys would make every sealed secret
    /// unreadable.
    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let keys = manager
            .get_connection()
            .query_one_raw(sea_orm_migration::sea_orm::Statement::from_string(
                manager.get_database_backend(),
                "SELECT COUNT(*) AS n FROM data_keys",
            ))
            .await?
            .map(|row| row.try_get::<i64>("", "n"))
            .transpose()?
            .unwrap_or(0);
        if keys > 0 {
            return Err(DbErr::Migration(
                "cannot roll back past the data keys: secrets in this database are encrypted with them".into(),
            ));
        }
        crate::drop_tables(manager, &["data_keys"]).await
    }
}
