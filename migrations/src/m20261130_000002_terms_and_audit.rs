//! Terms-of-service versions, users' acceptances of them, and the audit log.

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
                    .table("terms_versions")
                    .col(pk_uuid("id"))
                    .col(string_len_uniq("version", 64))
                    .col(text("url"))
                    .col(text("summary"))
                    .col(uuid("published_by"))
                    .col(timestamp_with_time_zone("published_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("terms_acceptances")
                    .col(pk_uuid("id"))
                    .col(uuid("user_id"))
                    .col(uuid("terms_version_id"))
                    .col(string_len("request_id", 100))
                    .col(timestamp_with_time_zone("accepted_at"))
                    .foreign_key(&mut cascade_fk(
                        "terms_acceptances",
                        "terms_version_id",
                        "terms_versions",
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_terms_acceptances_user_version")
                    .table("terms_acceptances")
                    .col("user_id")
                    .col("terms_version_id")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("audit_events")
                    .col(pk_uuid("id"))
                    .col(timestamp_with_time_zone("occurred_at"))
                    .col(uuid_null("actor_user_id"))
                    .col(uuid_null("actor_token_id"))
                    .col(string_len("action", 100))
                    .col(string_len("resource_type", 50))
                    .col(string_len("resource_id", 100))
                    .col(uuid_null("project_id"))
                    .col(string_len("request_id", 100))
                    .col(json("details"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_audit_events_project")
                    .table("audit_events")
                    .col("project_id")
                    .col("id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(
            manager,
            &["audit_events", "terms_acceptances", "terms_versions"],
        )
        .await
    }
}
