//! Git intake: a project's installations of a forge's push webhook (GitHub's format), each
//! with its secret (sealed), the branches that deploy which service, and where to report
//! commit statuses (the forge's API and a token, sealed); the deliveries they received,
//! stored before they are answered, the deployments made from them, and the commit statuses
//! owed to the forge for those deployments (an outbox: one row per deployment, its latest
//! state sent once the forge's limits allow); and a project's outbound webhook endpoints
//! with the messages owed to each (the delivery log).
//!
//! Exactly once is the database's to keep, not only the code's: a delivery is unique per
//! installation by its `X-GitHub-Delivery` id and by the digest of its signed body (a body
//! replayed under a fresh id is the same push), and a deployment made from a delivery is unique
//! per (delivery, service). `idx_git_deliveries_queued` lets the intake read the head of the
//! queue without reading what it already processed.

use crate::{cascade_fk, drop_tables};
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("git_installations")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(string_len("forge", 16))
                    .col(text("secret"))
                    .col(text_null("previous_secret"))
                    .col(timestamp_with_time_zone_null("previous_secret_until"))
                    .col(json("bindings"))
                    .col(text_null("status_api_url"))
                    .col(text_null("status_token"))
                    .col(uuid_null("created_by"))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk(
                        "git_installations",
                        "project_id",
                        "projects",
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_git_installations_project")
                    .table("git_installations")
                    .col("project_id")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("git_deliveries")
                    .col(pk_uuid("id"))
                    .col(uuid("installation_id"))
                    .col(uuid("project_id"))
                    .col(string_len("delivery_id", 100))
                    .col(string_len("payload_digest", 64))
                    .col(string_len("repository", 201))
                    .col(string_len("branch", 255))
                    .col(string_len("commit_sha", 64))
                    .col(text("commit_message"))
                    .col(string_len("pusher", 100))
                    .col(timestamp_with_time_zone("pushed_at"))
                    .col(timestamp_with_time_zone("received_at"))
                    .col(string_len("state", 16))
                    .col(text("reason").default(""))
                    .col(json("deployment_ids"))
                    .col(timestamp_with_time_zone_null("processed_at"))
                    .foreign_key(&mut cascade_fk(
                        "git_deliveries",
                        "installation_id",
                        "git_installations",
                    ))
                    .to_owned(),
            )
            .await?;
        for (name, column) in [
            ("uq_git_deliveries_delivery", "delivery_id"),
            ("uq_git_deliveries_digest", "payload_digest"),
        ] {
            manager
                .create_index(
                    Index::create()
                        .name(name)
                        .table("git_deliveries")
                        .col("installation_id")
                        .col(column)
                        .unique()
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("idx_git_deliveries_installation")
                    .table("git_deliveries")
                    .col("installation_id")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE INDEX idx_git_deliveries_queued ON git_deliveries (id) \
                 WHERE state = 'queued'",
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("forge_statuses")
                    .col(pk_uuid("deployment_id"))
                    .col(uuid("installation_id"))
                    .col(string_len("repository", 201))
                    .col(string_len("commit_sha", 64))
                    .col(string_len_null("sent_state", 16))
                    .col(boolean("done").default(false))
                    .col(integer("attempts").default(0))
                    .col(timestamp_with_time_zone("next_attempt_at"))
                    .col(text("last_error").default(""))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk(
                        "forge_statuses",
                        "installation_id",
                        "git_installations",
                    ))
                    .foreign_key(&mut cascade_fk(
                        "forge_statuses",
                        "deployment_id",
                        "deployments",
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_forge_statuses_due")
                    .table("forge_statuses")
                    .col("done")
                    .col("next_attempt_at")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("webhook_endpoints")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(text("url"))
                    .col(json("event_types"))
                    .col(text("secret"))
                    .col(text_null("previous_secret"))
                    .col(timestamp_with_time_zone_null("previous_secret_until"))
                    .col(integer("failures").default(0))
                    .col(timestamp_with_time_zone_null("open_until"))
                    .col(uuid_null("created_by"))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk(
                        "webhook_endpoints",
                        "project_id",
                        "projects",
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_endpoints_project")
                    .table("webhook_endpoints")
                    .col("project_id")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("webhook_messages")
                    .col(pk_uuid("id"))
                    .col(uuid("endpoint_id"))
                    .col(string_len("event_type", 64))
                    .col(text("payload"))
                    .col(string_len("state", 16))
                    .col(integer("attempts").default(0))
                    .col(timestamp_with_time_zone("next_attempt_at"))
                    .col(integer_null("last_status"))
                    .col(text("last_error").default(""))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone_null("delivered_at"))
                    .foreign_key(&mut cascade_fk(
                        "webhook_messages",
                        "endpoint_id",
                        "webhook_endpoints",
                    ))
                    .to_owned(),
            )
            .await?;
        for (name, columns) in [
            ("idx_webhook_messages_due", ["state", "next_attempt_at"]),
            ("idx_webhook_messages_endpoint", ["endpoint_id", "id"]),
        ] {
            manager
                .create_index(
                    Index::create()
                        .name(name)
                        .table("webhook_messages")
                        .col(columns[0])
                        .col(columns[1])
                        .to_owned(),
                )
                .await?;
        }
        // Who made a deployment from which push; one column per statement for SQLite.
        for column in [json_null("push"), uuid_null("push_delivery_id")] {
            manager
                .alter_table(
                    Table::alter()
                        .table("deployments")
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("uq_deployments_push")
                    .table("deployments")
                    .col("push_delivery_id")
                    .col("service_id")
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("uq_deployments_push")
                    .table("deployments")
                    .to_owned(),
            )
            .await?;
        for column in ["push_delivery_id", "push"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("deployments")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        drop_tables(
            manager,
            &[
                "webhook_messages",
                "webhook_endpoints",
                "forge_statuses",
                "git_deliveries",
                "git_installations",
            ],
        )
        .await
    }
}
