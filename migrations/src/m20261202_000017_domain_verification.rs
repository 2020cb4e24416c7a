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
        let mut verified = domains_table("domains_verified", false);
        verified
            .col(string_len_null("verification_token", 64))
            .col(timestamp_with_time_zone_null("verified_at"));
        domains_replace(
            manager,
            "domains_verified",
            verified,
            &format!(
                "INSERT INTO domains_verified ({SHARED}, verified_at) \
                 SELECT {SHARED}, created_at FROM domains"
            ),
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
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE UNIQUE INDEX uq_domains_verified_hostname ON domains (hostname) \
                 WHERE verified_at IS NOT NULL",
            )
            .await?;
        Ok(())
    }

    /// Keeps the verified claims only: the old table allowed one claim per hostname.
    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        domains_replace(
            manager,
            "domains_unverified",
            domains_table("domains_unverified", true),
            &format!(
                "INSERT INTO domains_unverified ({SHARED}) \
                 SELECT {SHARED} FROM domains WHERE verified_at IS NOT NULL"
            ),
        )
        .await
    }
}

/// The shared columns of a `domains` table named `table` (with `hostname` unique or not).
fn domains_table(table: &'static str, hostname_unique: bool) -> TableCreateStatement {
    let hostname = if hostname_unique {
        string_len_uniq("hostname", 253)
    } else {
        string_len("hostname", 253)
    };
    Table::create()
        .table(table)
        .col(pk_uuid("id"))
        .col(uuid("project_id"))
        .col(uuid("service_id"))
        .col(hostname)
        .col(big_integer("revision"))
        .col(timestamp_with_time_zone("created_at"))
        .col(timestamp_with_time_zone("updated_at"))
        .foreign_key(&mut cascade_fk(table, "project_id", "projects"))
        .foreign_key(&mut cascade_fk(table, "service_id", "services"))
        .to_owned()
}

/// Creates the table `name` as `new`, fills it with `copy`, and puts it in the place of
/// `domains`.
async fn domains_replace(
    manager: &SchemaManager<'_>,
    name: &'static str,
    new: TableCreateStatement,
    copy: &str,
) -> Result<(), DbErr> {
    manager.create_table(new).await?;
    manager.get_connection().execute_unprepared(copy).await?;
    manager
        .drop_table(Table::drop().table("domains").to_owned())
        .await?;
    manager
        .rename_table(Table::rename().table(name, "domains").to_owned())
        .await
}
