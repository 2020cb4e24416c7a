//! A service's size (`{cpu_millis, memory_mib}`): what each of its instances is given. The
//! services made before sizes get the default size (half a vCPU, 512 MiB); their deployments
//! already made keep none, and are given the operator's default when their instances are
//! provisioned.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("services")
                    .add_column(json_null("size"))
                    .to_owned(),
            )
            .await?;
        manager
            .get_connection()
            .execute_unprepared(
                r#"UPDATE services SET size = '{"cpu_millis":500,"memory_mib":512}' WHERE size IS NULL"#,
            )
            .await
            .map(|_| ())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("services")
                    .drop_column("size")
                    .to_owned(),
            )
            .await
    }
}
