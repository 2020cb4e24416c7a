//! Leadership of background work across replicas. Every replica serves the whole API, but each
//! kind of background work ([`Work`]) is done by one replica at a time: the holder of that
//! kind's row in `leases`, until its `expires_at_ms` (the database's clock, so that the
//! replicas' clocks do not matter).
//!
//! - Each replica renews the leases it holds, and tries to take those that lapsed, every
//!   [`RENEW_EVERY`], on a connection of its own ([`crate::db::connect_dedicated`]) so that a
//!   busy request pool never delays a renewal. A lease lasts [`LEASE_TTL`]: a leader that dies
//!   is replaced within `LEASE_TTL + RENEW_EVERY` (1.8 s) plus a round trip; one that stops
//!   gracefully hands over at once.
//! - A change of holder raises the lease's `term`. Each transaction of leader-only work checks,
//!   inside itself, that the lease still has the term this replica holds
//!   ([`App::lease_fence`]; on PostgreSQL the row is read `FOR SHARE`, so a takeover waits for
//!   the transaction, and a transaction after the takeover sees the new term): a leader paused
//!   past its lease (a long GC-free stall, a frozen VM) wakes to find its writes refused,
//!   as Temporal's shard `range_id` refuses a stale shard owner.
//! - A replica stops acting on a lease locally before the database would let it lapse (it
//!   counts from when it sent the renewal), so the fence is the last line, not the only one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, Value};
use serde::Serialize;
use tokio::sync::watch;
use utoipa::ToSchema;

use crate::app::App;
use crate::error::{AppError, AppResult, ErrorCode};

/// How long a lease lasts after each renewal.
pub const LEASE_TTL: Duration = Duration::from_millis(1500);
/// How often leases are renewed, and lapsed ones tried.
pub const RENEW_EVERY: Duration = Duration::from_millis(300);

/// A kind of background work with one leader at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// The deploy reconciler: placement, settling, draining, evacuations, provider operations.
    Deploys,
    /// Health checks of deployed instances and what their results change.
    InstanceHealth,
    /// Purges of expired records.
    Maintenance,
    /// Publishing routing revisions (every replica serves them).
    Routing,
    /// Periodic health probes of providers' APIs.
    ProviderProbes,
}

impl Work {
    pub const ALL: [Work; 5] = [
        Work::Deploys,
        Work::InstanceHealth,
        Work::Maintenance,
        Work::Routing,
        Work::ProviderProbes,
    ];

    /// The work whose lease has `kind`.
    pub fn of_kind(kind: &str) -> Option<Work> {
        Work::ALL.into_iter().find(|work| work.as_str() == kind)
    }

    /// The lease's `kind`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Work::Deploys => "deploys",
            Work::InstanceHealth => "instance_health",
            Work::Maintenance => "maintenance",
            Work::Routing => "routing",
            Work::ProviderProbes => "provider_probes",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Held {
    term: i64,
    /// When this replica stops acting on it, unless renewed.
    until: Instant,
}

/// The leases this replica holds.
pub struct Leases {
    /// This replica's id: the `holder` of its leases.
    pub replica: String,
    held: Mutex<HashMap<Work, Held>>,
    /// Works this replica leaves to the others until then (its task for them kept failing).
    handed_over: Mutex<HashMap<Work, Instant>>,
    /// Bumped whenever this replica takes or loses a lease.
    changed: watch::Sender<u64>,
}

impl Leases {
    pub fn new(replica: String) -> Self {
        Self {
            replica,
            held: Mutex::default(),
            handed_over: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }

    /// A receiver that sees the next time this replica takes or loses a lease.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The works whose leases this replica tries to take or renew now.
    fn wanted(&self) -> Vec<Work> {
        let mut handed_over = self.handed_over.lock().expect("not poisoned");
        let now = Instant::now();
        handed_over.retain(|_, until| *until > now);
        Work::ALL
            .into_iter()
            .filter(|work| !handed_over.contains_key(work))
            .collect()
    }

    /// The term of `work`'s lease if this replica holds it now.
    pub fn term(&self, work: Work) -> Option<i64> {
        self.held
            .lock()
            .expect("not poisoned")
            .get(&work)
            .filter(|held| held.until > Instant::now())
            .map(|held| held.term)
    }

    /// Whether this replica leads `work` now.
    pub fn leads(&self, work: Work) -> bool {
        self.term(work).is_some()
    }

    fn record(&self, work: Work, outcome: Option<Held>) {
        let mut held = self.held.lock().expect("not poisoned");
        let before = held.get(&work).map(|h| h.term);
        match outcome {
            Some(now) => {
                if before != Some(now.term) {
                    tracing::info!(work = work.as_str(), term = now.term, "leading");
                    self.changed
                        .send_modify(|count| *count = count.wrapping_add(1));
                }
                held.insert(work, now);
            }
            None => {
                if let Some(term) = held.remove(&work).map(|h| h.term) {
                    tracing::info!(work = work.as_str(), term, "no longer leading");
                    self.changed
                        .send_modify(|count| *count = count.wrapping_add(1));
                }
            }
        }
        metrics::gauge!("leader", "work" => work.as_str()).set(if outcome.is_some() {
            1.0
        } else {
            0.0
        });
    }

    fn forget_all(&self) {
        for work in Work::ALL {
            self.record(work, None);
        }
    }
}

/// The database's clock in milliseconds since the epoch, as an SQL expression.
pub(crate) fn now_ms_sql(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint",
        _ => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    }
}

/// `sql` written with `$1`, `$2`, … as a statement of `backend` (SQLite numbers them `?1`).
pub(crate) fn statement(
    backend: DbBackend,
    sql: &str,
    values: impl IntoIterator<Item = Value>,
) -> Statement {
    let sql = match backend {
        DbBackend::Postgres => sql.to_owned(),
        _ => sql.replace('$', "?"),
    };
    Statement::from_sql_and_values(backend, sql, values)
}

/// Takes or renews, for `holder`, each lease of `works` that is its or has lapsed, in one
/// statement; the kinds it holds now, with their terms.
async fn leases_acquire(
    db: &DatabaseConnection,
    holder: &str,
    works: &[Work],
) -> Result<Vec<(String, i64)>, sea_orm::DbErr> {
    if works.is_empty() {
        return Ok(Vec::new());
    }
    let backend = db.get_database_backend();
    let now = now_ms_sql(backend);
    let rows: Vec<String> = (0..works.len())
        .map(|i| format!("(${}, $1, 1, {now} + $2, {now})", i + 3))
        .collect();
    // A renewal keeps the term; a takeover (only of a lapsed lease) raises it. Rows the WHERE
    // leaves alone (another holder's current lease) are not returned.
    let sql = format!(
        "INSERT INTO leases (kind, holder, term, expires_at_ms, acquired_at_ms) VALUES {} \
         ON CONFLICT (kind) DO UPDATE SET \
           term = CASE WHEN leases.holder = excluded.holder THEN leases.term ELSE leases.term + 1 END, \
           acquired_at_ms = CASE WHEN leases.holder = excluded.holder \
             THEN leases.acquired_at_ms ELSE excluded.acquired_at_ms END, \
           holder = excluded.holder, \
           expires_at_ms = excluded.expires_at_ms \
         WHERE leases.holder = excluded.holder OR leases.expires_at_ms < excluded.acquired_at_ms \
         RETURNING kind, term",
        rows.join(", ")
    );
    let ttl_ms = LEASE_TTL.as_millis() as i64;
    let mut values: Vec<Value> = vec![holder.into(), ttl_ms.into()];
    values.extend(works.iter().map(|work| Value::from(work.as_str())));
    db.query_all_raw(statement(backend, &sql, values))
        .await?
        .into_iter()
        .map(|row| Ok((row.try_get("", "kind")?, row.try_get("", "term")?)))
        .collect()
}

/// What a transaction of leader-only work gets when this replica does not lead it (any more).
fn lease_lost(work: Work) -> AppError {
    AppError::new(
        ErrorCode::NotReady,
        format!("this replica no longer leads {}", work.as_str()),
    )
}

impl App {
    /// One round of renewals: every kind of work's lease renewed or tried (but those this
    /// replica handed over), on `db` (the replica's own connection). A failure (the database
    /// unreachable) leaves the leases to lapse here as they will in the database.
    pub async fn leases_renew(&self, db: &DatabaseConnection) -> Result<(), sea_orm::DbErr> {
        let sent = Instant::now();
        let held = leases_acquire(db, &self.leases.replica, &self.leases.wanted())
            .await
            .inspect_err(|_| metrics::counter!("lease_renewal_failures_total").increment(1))?;
        for work in Work::ALL {
            let term = held
                .iter()
                .find(|(kind, _)| kind == work.as_str())
                .map(|(_, term)| *term);
            self.leases.record(
                work,
                term.map(|term| Held {
                    term,
                    // A tenth of the lease's length short: the database counts from a moment
                    // after this one, and clocks run at slightly different rates.
                    until: sent + LEASE_TTL - LEASE_TTL / 10,
                }),
            );
        }
        Ok(())
    }

    /// Hands every lease over and signs the replica off (it stops), on `db`.
    pub async fn leases_release_all(&self, db: &DatabaseConnection) {
        self.leases.forget_all();
        let backend = db.get_database_backend();
        let released = db
            .execute_raw(statement(
                backend,
                "UPDATE leases SET expires_at_ms = 0 WHERE holder = $1",
                [self.leases.replica.clone().into()],
            ))
            .await;
        if let Err(err) = released {
            tracing::warn!(error = %err, "could not hand the leases over");
        }
        if let Err(err) = self.replica_sign_off(db).await {
            tracing::warn!(error = %err, "could not sign the replica off");
        }
    }

    /// Leaves `work` to the other replicas for `period` (its task here keeps failing): the
    /// lease is released at once, and not taken or renewed meanwhile. Does nothing, and
    /// answers false, when no other replica is alive to take it.
    pub async fn lease_hand_over(&self, work: Work, period: Duration) -> AppResult<bool> {
        if self.replicas_alive_others().await? == 0 {
            return Ok(false);
        }
        self.leases
            .handed_over
            .lock()
            .expect("not poisoned")
            .insert(work, Instant::now() + period);
        self.leases.record(work, None);
        let backend = self.db.get_database_backend();
        self.db
            .execute_raw(statement(
                backend,
                "UPDATE leases SET expires_at_ms = 0 WHERE holder = $1 AND kind = $2",
                [self.leases.replica.clone().into(), work.as_str().into()],
            ))
            .await?;
        Ok(true)
    }

    /// Checks, inside `txn`, that this replica still leads `work` with the term it holds; a
    /// transaction of leader-only work calls it before it commits anything.
    pub async fn lease_fence(&self, txn: &impl ConnectionTrait, work: Work) -> AppResult<()> {
        let term = self.leases.term(work).ok_or_else(|| lease_lost(work))?;
        self.lease_fence_term(txn, work, term).await
    }

    /// Checks, inside `txn`, that `work`'s lease is this replica's with `term`.
    pub async fn lease_fence_term(
        &self,
        txn: &impl ConnectionTrait,
        work: Work,
        term: i64,
    ) -> AppResult<()> {
        let backend = txn.get_database_backend();
        let lock = match backend {
            DbBackend::Postgres => " FOR SHARE",
            // SQLite: write transactions begin IMMEDIATE and exclude every other writer,
            // renewals included.
            _ => "",
        };
        let row = txn
            .query_one_raw(statement(
                backend,
                &format!("SELECT term FROM leases WHERE kind = $1 AND holder = $2{lock}"),
                [work.as_str().into(), self.leases.replica.clone().into()],
            ))
            .await?;
        match row.map(|row| row.try_get::<i64>("", "term")).transpose()? {
            Some(found) if found == term => Ok(()),
            _ => {
                metrics::counter!("lease_fenced_writes_total", "work" => work.as_str())
                    .increment(1);
                Err(lease_lost(work))
            }
        }
    }
}
