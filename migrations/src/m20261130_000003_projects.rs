//! Projects, their members (with a role each) and their environments.

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
                    .table("projects")
                    .col(pk_uuid("id"))
                    .col(string_len("name", 100))
                    .col(text("description"))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("project_members")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(uuid("user_id"))
                    .col(string_len("role", 16))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk("project_members", "project_id", "projects"))
                    .foreign_key(&mut cascade_fk("project_members", "user_id", "users"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_project_members_project_user")
                    .table("project_members")
                    .col("project_id")
                    .col("user_id")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_project_members_user")
                    .table("project_members")
                    .col("user_id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("environments")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(string_len("name", 63))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk("environments", "project_id", "projects"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_environments_project_name")
                    .table("environments")
                    .col("project_id")
                    .col("name")
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(manager, &["environments", "project_members", "projects"]).await
    }
}
