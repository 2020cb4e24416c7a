//! The deploy pipeline: deployments of a service's spec, the instances the reconciler makes
//! for them (each key chosen and stored before any provider is called, so that a crash at any
//! point leaves nothing duplicated or orphaned), each deployment's events, evacuations of a
//! provider, and the operator's controls of the pipeline (pause, drain rate).
//!
//! Instances do not cascade from services: a service or project with live instances cannot be
//! deleted (their instances must be removed at their providers first).

use crate::cascade_fk;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite alters one column at a time.
        for column in [json_null("placement"), json_null("health_check")] {
            manager
                .alter_table(
                    Table::alter()
                        .table("services")
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_table(
                Table::create()
                    .table("deployments")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(uuid("service_id"))
                    .col(big_integer("number"))
                    .col(json("spec"))
                    .col(string_len("state", 16))
                    .col(text("reason").default(""))
                    .col(uuid_null("rollback_of"))
                    .col(boolean("cancel_requested").default(false))
                    .col(uuid_null("created_by"))
                    .col(big_integer("event_seq").default(0))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .col(timestamp_with_time_zone_null("finished_at"))
                    .col(timestamp_with_time_zone_null("healthy_at"))
                    .foreign_key(&mut cascade_fk("deployments", "project_id", "projects"))
                    .foreign_key(&mut cascade_fk("deployments", "service_id", "services"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_deployments_service_number")
                    .table("deployments")
                    .col("service_id")
                    .col("number")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_deployments_state")
                    .table("deployments")
                    .col("state")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("instances")
                    .col(pk_uuid("id"))
                    .col(uuid("deployment_id"))
                    .col(uuid("service_id"))
                    .col(uuid("project_id"))
                    .col(string_len_uniq("instance_key", 63))
                    .col(string_len("provider", 63))
                    .col(string_len("region", 63))
                    .col(string_len_null("address", 255))
                    .col(string_len_null("provider_id", 255))
                    .col(string_len("state", 16))
                    .col(string_len("health", 16).default("unknown"))
                    .col(timestamp_with_time_zone_null("health_checked_at"))
                    .col(integer("health_streak").default(0))
                    .col(integer("attempts").default(0))
                    .col(timestamp_with_time_zone_null("next_attempt_at"))
                    .col(text("last_error").default(""))
                    .col(uuid_null("replaces"))
                    .col(string_len_null("claimed_by", 64))
                    .col(timestamp_with_time_zone_null("claimed_until"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk("instances", "deployment_id", "deployments"))
                    .to_owned(),
            )
            .await?;
        for (name, column) in [
            ("idx_instances_service", "service_id"),
            ("idx_instances_state", "state"),
            ("idx_instances_provider", "provider"),
        ] {
            manager
                .create_index(
                    Index::create()
                        .name(name)
                        .table("instances")
                        .col(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_table(
                Table::create()
                    .table("deployment_events")
                    .col(uuid("deployment_id"))
                    .col(big_integer("seq"))
                    .col(string_len("kind", 32))
                    .col(text("message"))
                    .col(json("details"))
                    .col(timestamp_with_time_zone("created_at"))
                    .primary_key(Index::create().col("deployment_id").col("seq"))
                    .foreign_key(&mut cascade_fk(
                        "deployment_events",
                        "deployment_id",
                        "deployments",
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("evacuations")
                    .col(pk_uuid("id"))
                    .col(string_len("provider", 63))
                    .col(string_len("state", 16))
                    .col(integer("total").default(0))
                    .col(integer("moved").default(0))
                    .col(json("unremoved"))
                    .col(uuid_null("created_by"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .col(timestamp_with_time_zone_null("finished_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("deploy_controls")
                    .col(integer("id").primary_key())
                    .col(boolean("paused").default(false))
                    .col(double("drain_rate").default(0.0))
                    .col(text("reason").default(""))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::drop_tables(
            manager,
            &[
                "deploy_controls",
                "evacuations",
                "deployment_events",
                "instances",
                "deployments",
            ],
        )
        .await?;
        for column in ["health_check", "placement"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("services")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
