//! Invitations to projects: a member is added by inviting an email, and the user with that
//! email accepts. Inviting answers the same whether or not anyone has the email, so that a
//! project's administrators cannot find out which emails have accounts.

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
                    .table("project_invitations")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(string_len("email", 320))
                    .col(string_len("role", 16))
                    .col(uuid_null("invited_by"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("expires_at"))
                    .foreign_key(&mut cascade_fk(
                        "project_invitations",
                        "project_id",
                        "projects",
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_project_invitations_project_email")
                    .table("project_invitations")
                    .col("project_id")
                    .col("email")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_project_invitations_email")
                    .table("project_invitations")
                    .col("email")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(manager, &["project_invitations"]).await
    }
}
