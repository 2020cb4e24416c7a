//! The replicas sharing the database: each `bulkhead serve` announces itself (id, address,
//! version) and keeps a heartbeat in `replicas`, renewed with its leases ([`crate::app::cluster::leases`]),
//! and signs off when it stops. `GET /v1/status` shows them with the leader of each kind of
//! background work.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection};

use crate::app::App;
use crate::app::cluster::leases::{now_ms_sql, statement};
use crate::error::{AppError, AppResult};

/// How often a replica's heartbeat is written.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// A replica whose heartbeat is older than this is shown as not alive.
pub(crate) const ALIVE_WITHIN_MS: i64 = 5_000;
/// Replicas silent for longer than this are forgotten (by the maintenance leader).
const FORGET_AFTER_MS: i64 = 24 * 3600 * 1000;

impl App {
    /// Announces this replica listening on `address`, or renews its heartbeat (announcing it
    /// again if a purge forgot it).
    pub async fn replica_heartbeat(
        &self,
        db: &DatabaseConnection,
        address: &str,
    ) -> Result<(), sea_orm::DbErr> {
        let backend = db.get_database_backend();
        let now = now_ms_sql(backend);
        db.execute_raw(statement(
            backend,
            &format!(
                "INSERT INTO replicas (id, address, version, started_at_ms, heartbeat_at_ms) \
                 VALUES ($1, $2, $3, {now}, {now}) \
                 ON CONFLICT (id) DO UPDATE SET heartbeat_at_ms = excluded.heartbeat_at_ms"
            ),
            [
                self.leases.replica.clone().into(),
                address.into(),
                env!("CARGO_PKG_VERSION").into(),
            ],
        ))
        .await
        .map(|_| ())
    }

    /// Removes this replica from the list (it stops).
    pub(crate) async fn replica_sign_off(
        &self,
        db: &DatabaseConnection,
    ) -> Result<(), sea_orm::DbErr> {
        db.execute_raw(statement(
            db.get_database_backend(),
            "DELETE FROM replicas WHERE id = $1",
            [self.leases.replica.clone().into()],
        ))
        .await
        .map(|_| ())
    }

    /// Forgets replicas silent for a day; returns how many.
    pub(crate) async fn replicas_purge(&self) -> AppResult<u64> {
        let backend = self.db.get_database_backend();
        let now = now_ms_sql(backend);
        let done = self
            .db
            .execute_raw(statement(
                backend,
                &format!("DELETE FROM replicas WHERE heartbeat_at_ms < {now} - $1"),
                [FORGET_AFTER_MS.into()],
            ))
            .await?;
        Ok(done.rows_affected())
    }

    /// How many other replicas are alive (their heartbeat recent).
    pub(crate) async fn replicas_alive_others(&self) -> AppResult<u64> {
        let backend = self.db.get_database_backend();
        let now = now_ms_sql(backend);
        let row = self
            .db
            .query_one_raw(statement(
                backend,
                &format!(
                    "SELECT COUNT(*) AS alive FROM replicas \
                     WHERE id <> $1 AND heartbeat_at_ms >= {now} - $2"
                ),
                [self.leases.replica.clone().into(), ALIVE_WITHIN_MS.into()],
            ))
            .await?
            .ok_or_else(|| AppError::internal("counting replicas gave no row"))?;
        Ok(row.try_get::<i64>("", "alive")? as u64)
    }
}
