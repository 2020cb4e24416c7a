//! What an operator sees of the control plane (`GET /v1/status`): its replicas, the leader of
//! each kind of background work, and the background tasks of the replica that answers.

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;
use serde::Serialize;
use utoipa::ToSchema;

use crate::app::App;
use crate::app::background::driver::TaskStatus;
use crate::app::cluster::leases::{Work, now_ms_sql, statement};
use crate::app::cluster::replicas::ALIVE_WITHIN_MS;
use crate::authz::Principal;
use crate::error::{AppError, AppResult};

/// A replica of the control plane.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReplicaView {
    pub id: String,
    /// Where it is reached: its `--advertise-url`, else the address it bound.
    pub address: String,
    /// Its Bulkhead version.
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    /// Whether its heartbeat is recent (within 5 s of the database's clock).
    pub alive: bool,
}

/// Who leads a kind of background work.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LeaderView {
    pub work: Work,
    /// The replica holding the lease.
    pub holder: String,
    /// Raised at each change of leader; the work's writes check it.
    pub term: i64,
    pub acquired_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Whether the lease is current (a lapsed one waits for the next replica to take it).
    pub current: bool,
}

/// The control plane's replicas and leaders.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterStatus {
    /// The replica that answered.
    pub replica: String,
    /// Every replica that announced itself in the last day, oldest first.
    pub replicas: Vec<ReplicaView>,
    /// Each kind of work that has had a leader.
    pub leaders: Vec<LeaderView>,
    /// The background tasks of the replica that answered, by name.
    pub tasks: Vec<TaskStatus>,
    /// On PostgreSQL, the server the replica that answered follows as the primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<crate::db::primary::DatabasePrimary>,
}

fn time_of_ms(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

impl App {
    /// The replicas and the leaders of their work (administrators).
    pub async fn cluster_status(&self, principal: &Principal) -> AppResult<ClusterStatus> {
        principal.require_admin()?;
        let backend = self.db.get_database_backend();
        let now_row = self
            .db
            .query_one_raw(statement(
                backend,
                &format!("SELECT {} AS now_ms", now_ms_sql(backend)),
                [],
            ))
            .await?
            .ok_or_else(|| AppError::internal("the database's clock gave no row"))?;
        let now_ms: i64 = now_row.try_get("", "now_ms")?;
        let mut replicas = Vec::new();
        for row in self
            .db
            .query_all_raw(statement(
                backend,
                "SELECT id, address, version, started_at_ms, heartbeat_at_ms FROM replicas \
                 ORDER BY started_at_ms, id",
                [],
            ))
            .await?
        {
            let heartbeat_at_ms: i64 = row.try_get("", "heartbeat_at_ms")?;
            replicas.push(ReplicaView {
                id: row.try_get("", "id")?,
                address: row.try_get("", "address")?,
                version: row.try_get("", "version")?,
                started_at: time_of_ms(row.try_get("", "started_at_ms")?),
                heartbeat_at: time_of_ms(heartbeat_at_ms),
                alive: now_ms - heartbeat_at_ms <= ALIVE_WITHIN_MS,
            });
        }
        let mut leaders = Vec::new();
        for row in self
            .db
            .query_all_raw(statement(
                backend,
                "SELECT kind, holder, term, acquired_at_ms, expires_at_ms FROM leases",
                [],
            ))
            .await?
        {
            let kind: String = row.try_get("", "kind")?;
            let Some(work) = Work::of_kind(&kind) else {
                continue;
            };
            let expires_at_ms: i64 = row.try_get("", "expires_at_ms")?;
            leaders.push(LeaderView {
                work,
                holder: row.try_get("", "holder")?,
                term: row.try_get("", "term")?,
                acquired_at: time_of_ms(row.try_get("", "acquired_at_ms")?),
                expires_at: time_of_ms(expires_at_ms),
                current: expires_at_ms > now_ms,
            });
        }
        leaders.sort_by_key(|leader| Work::ALL.iter().position(|w| *w == leader.work));
        Ok(ClusterStatus {
            replica: self.leases.replica.clone(),
            replicas,
            leaders,
            tasks: self.tasks.statuses(),
            database: self.primary.as_ref().map(|primary| primary.status()),
        })
    }
}
