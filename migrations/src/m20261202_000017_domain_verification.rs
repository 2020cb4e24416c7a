//! Domain verification: a project's claim of a hostname routes only once the project proved it
//! controls the name's DNS (`verified_at`), by publishing its claim's `verification_token`.
//!
//! Several projects may claim one hostname while none has proved it (a squatter's claim must
//! not lock the owner out), so `hostname` is unique per project, and unique among verified
//! claims only (a partial index: both SQLite and PostgreSQL have them). SQLite cannot drop the
//! table's inline `UNIQUE (hostname)`, so the table is built again on both backends. Existing
//! claims count as verified when they were made: an upgrade takes no route away.

use crate::cascade_fk;
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The columns both versions of the table share, in order.
const SHARED: &str = "id, project_id, service_id, hostname, revision, created_at, updated_at";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("domains_verified")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(uuid("service_id"))
                    .col(string_len("hostname", 253))
                    .col(string_len_null("verification_token", 64))
                    .col(timestamp_with_time_zone_null("verified_at"))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk(
                        "domains_verified",
                        "project_id",
                        "projects",
                    ))
                    .foreign_key(&mut cascade_fk(
                        "domains_verified",
                        "service_id",
                        "services",
                    ))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared(&format!(
            "INSERT INTO domains_verified ({SHARED}, verified_at) \
             SELECT {SHARED}, created_at FROM domains"
        ))
        .await?;
        manager
            .drop_table(Table::drop().table("domains").to_owned())
            .await?;
        manager
            .rename_table(
                Table::rename()
                    .table("domains_verified", "domains")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_domains_project_hostname")
                    .table("domains")
                    .col("project_id")
                    .col("hostname")
                    .unique()
                    .to_owned(),
            )
            .await?;
        db.execute_unprepared(
            "CREATE UNIQUE INDEX uq_domains_verified_hostname ON domains (hostname) \
             WHERE verified_at IS NOT NULL",
        )
        .await?;
        Ok(())
    }

    /// Keeps the verified claims only: the old table allowed one claim per hostname.
    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("domains_unverified")
                    .col(pk_uuid("id"))
                    .col(uuid("project_id"))
                    .col(uuid("service_id"))
                    .col(string_len_uniq("hostname", 253))
                    .col(big_integer("revision"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(&mut cascade_fk(
                        "domains_unverified",
                        "project_id",
                        "projects",
                    ))
                    .foreign_key(&mut cascade_fk(
                        "domains_unverified",
                        "service_id",
                        "services",
                    ))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared(&format!(
            "INSERT INTO domains_unverified ({SHARED}) \
             SELECT {SHARED} FROM domains WHERE verified_at IS NOT NULL"
        ))
        .await?;
        manager
            .drop_table(Table::drop().table("domains").to_owned())
            .await?;
        manager
            .rename_table(
                Table::rename()
                    .table("domains_unverified", "domains")
                    .to_owned(),
            )
            .await
    }
}
