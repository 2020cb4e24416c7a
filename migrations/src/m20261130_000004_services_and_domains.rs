//! Services (what runs in an environment) and the domains bound to them.
//!
//! A service's `regions` and `variables` are JSON documents: they are always read and written
//! whole with their service. Later issues (deployments, placement) add their own tables that
//! reference `services.id`.

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
                    .table("services")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(uuid("environment_id"))
                    .col(string_len("name", 63))
                    .col(json("source"))
                    .col(integer("port"))
                    .col(integer("replicas"))
                    .col(json("regions"))
                    .col(json("variables"))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk("services", "project_id", "projects"))
                    .foreign_key(&mut cascade_fk(
                        "services",
                        "environment_id",
                        "environments",
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_services_environment_name")
                    .table("services")
                    .col("environment_id")
                    .col("name")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("domains")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(uuid("service_id"))
                    .col(string_len_uniq("hostname", 253))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk("domains", "project_id", "projects"))
                    .foreign_key(&mut cascade_fk("domains", "service_id", "services"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(manager, &["domains", "services"]).await
    }
}
