//! The database connection: opening SQLite (created if missing) or PostgreSQL, running
//! migrations, and the checks behind `/readyz`. A PostgreSQL URL may name several servers;
//! [`primary`] finds and follows the one that accepts writes.

pub mod primary;

pub use primary::Primary;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use bulkhead_migrations::{Migrator, MigratorTrait};
use sea_orm::sqlx::SqliteConnection;
use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, SqliteTransactionMode, Statement, TransactionOptions, TransactionTrait,
};

/// Opens the database at `url`. For SQLite, the file and its directory are created if missing,
/// and the database runs in WAL mode so that readers never wait for the writer.
pub async fn connect(url: &str) -> anyhow::Result<DatabaseConnection> {
    let url = &one_server(url).await?;
    let max_connections = if url.starts_with("sqlite:") { 8 } else { 16 };
    Ok(Database::connect(options(url, PoolKind::Shared(max_connections))?).await?)
}

/// A single connection for migrating and setting up the database, holding the set-up lock
/// until [`Setup::close`] (or until it is dropped).
///
/// One connection, because SQLite checks a DDL statement against the schema its connection
/// cached; on a pool, `DROP COLUMN` after an `ADD COLUMN` made on another connection fails with
/// "no such column" (seen in the up-down-up migration tests). One connection sees its own
/// changes.
///
/// The lock makes replicas starting together take turns: each waits for the one migrating
/// (and creating the first keys and the administrator) and then finds nothing left to do,
/// where without it their `CREATE TABLE`s raced and all but one failed. On PostgreSQL it is an
/// advisory lock of the connection (a replica that dies releases it with its connection); on
/// SQLite, a lock on a file beside the database (released by the operating system with the
/// process).
pub struct Setup {
    pub db: DatabaseConnection,
    _file_lock: Option<std::fs::File>,
}

impl Setup {
    /// Releases the lock.
    pub async fn close(self) -> Result<(), DbErr> {
        self.db.close().await
    }
}

/// Opens the database for migrating it, holding the set-up lock (see [`Setup`]).
pub async fn connect_for_migrations(url: &str) -> anyhow::Result<Setup> {
    // On SQLite the lock comes first: opening a connection writes (WAL mode), and would wait
    // behind another process's set-up.
    let file_lock = match url.starts_with("sqlite:") {
        true => sqlite_setup_lock(url).await?,
        false => None,
    };
    let url = &one_server(url).await?;
    let db = connect_dedicated(url).await?;
    if db.get_database_backend() == DbBackend::Postgres {
        let taken = db
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                format!("SELECT pg_try_advisory_lock({SETUP_LOCK}) AS taken"),
            ))
            .await?
            .map(|row| row.try_get::<bool>("", "taken"))
            .transpose()?
            .unwrap_or(false);
        if !taken {
            tracing::info!("waiting for another replica to finish setting up the database");
            db.execute_unprepared(&format!("SELECT pg_advisory_lock({SETUP_LOCK})"))
                .await?;
        }
    }
    Ok(Setup {
        db,
        _file_lock: file_lock,
    })
}

/// Locks `<database file>.setup-lock`, waiting for another process that holds it.
async fn sqlite_setup_lock(url: &str) -> anyhow::Result<Option<std::fs::File>> {
    let parsed = SqliteConnectOptions::from_str(url)?;
    let database = parsed.get_filename();
    if database == Path::new(":memory:") {
        return Ok(None);
    }
    if let Some(dir) = database.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        bulkhead_common::files::private_dir_create(dir)?;
    }
    let mut path = database.as_os_str().to_owned();
    path.push(".setup-lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => {
            tracing::info!("waiting for another process to finish setting up the database");
            let file = tokio::task::spawn_blocking(move || file.lock().map(|()| file)).await??;
            Ok(Some(file))
        }
        Err(std::fs::TryLockError::Error(err)) => Err(err.into()),
    }
}

/// The PostgreSQL advisory lock held while the schema is migrated ("bulkhead" in ASCII).
const SETUP_LOCK: i64 = 7_094_695_996_560_859_492;

/// Opens one connection of its own that the pool never closes for age or idleness (sqlx closes
/// pooled connections after `idle_timeout` and `max_lifetime`), only when it breaks: for the
/// set-up lock, which lives as long as its connection, and for renewing leases, which must not
/// wait behind the requests' pool.
pub async fn connect_dedicated(url: &str) -> anyhow::Result<DatabaseConnection> {
    let url = &one_server(url).await?;
    Ok(Database::connect(options(url, PoolKind::Dedicated)?).await?)
}

/// What a pool is for.
#[derive(Debug, Clone, Copy)]
pub enum PoolKind {
    /// Requests' pool of up to this many connections.
    Shared(u32),
    /// One connection of its own, kept however old or idle ([`connect_dedicated`]).
    Dedicated,
}

/// `url` with one server: for a PostgreSQL URL naming several, the one that accepts writes
/// now (for commands that connect once; a server follows it with [`Primary`]).
async fn one_server(url: &str) -> anyhow::Result<String> {
    if primary::is_postgres(url) && primary::host_urls(url)?.len() > 1 {
        let primary = Primary::locate(url).await?.expect("a PostgreSQL URL");
        return Ok(primary.url());
    }
    Ok(url.to_owned())
}

/// Pool options for `url` and `kind`; for SQLite, the file and its directory are created if
/// missing.
fn options(url: &str, kind: PoolKind) -> anyhow::Result<ConnectOptions> {
    let mut options = ConnectOptions::new(url);
    options
        .sqlx_logging(false)
        .acquire_timeout(primary::ACQUIRE_TIMEOUT);
    match kind {
        PoolKind::Shared(max_connections) => {
            // Pinging a connection on every checkout costs a round trip per query; pinging
            // only connections idle for a while still catches the ones a server or proxy
            // dropped.
            options
                .max_connections(max_connections)
                .test_before_acquire_if_idle_for(Duration::from_secs(30));
        }
        PoolKind::Dedicated => {
            options
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None::<Duration>)
                .max_lifetime(None::<Duration>);
        }
    }
    if url.starts_with("sqlite:") {
        let parsed = SqliteConnectOptions::from_str(url)?;
        if let Some(dir) = parsed
            .get_filename()
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
        {
            bulkhead_common::files::private_dir_create(dir)?;
        }
        if parsed.get_filename() != Path::new(":memory:") {
            private_file_create(parsed.get_filename())?;
        }
        options.map_sqlx_sqlite_opts(|opts| {
            opts.create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true)
                .row_buffer_size(SQLITE_ROW_CHANNEL)
        });
        options.map_sqlx_sqlite_pool_opts(|pool| {
            pool.after_connect(|connection, _| Box::pin(query_plans_keep(connection)))
        });
    }
    Ok(options)
}

/// Rows a SQLite connection's worker thread may hand over before the query's task takes them.
///
/// sqlx runs each SQLite connection on a thread of its own, which sends each row over a
/// channel of this size; a full channel stops that thread until the task reading the rows
/// runs again, and on a busy core each such stop is a round of thread switches. With the
/// default (50), a page of 100 services took twice as long as a page of 50 (`benches/load.sh`);
/// this holds the largest page (200, and the row that says another page follows) at once.
const SQLITE_ROW_CHANNEL: usize = 256;

/// Turns on SQLite's query planner stability guarantee for `connection`.
///
/// Without it, SQLite marks a prepared statement stale whenever a parameter that its planner
/// read is bound again, and it reads the one of `LIMIT ?`: every `one()` (sea-orm adds
/// `LIMIT ?` with 1 bound) and every page of a list was parsed and planned again on each
/// execution, although sqlx keeps it prepared (`sqlite3Reprepare` was 16% of the server's CPU
/// serving a list). With it, a plan does not depend on the values bound, which Bulkhead's
/// queries never needed (no `LIKE ?`, no `ANALYZE` statistics).
async fn query_plans_keep(connection: &mut SqliteConnection) -> Result<(), sea_orm::sqlx::Error> {
    let mut handle = connection.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    // SAFETY: `db` is this connection's open handle, held by the lock for the call;
    // SQLITE_DBCONFIG_ENABLE_QPSG takes an int (1: on) and an optional int pointer.
    let code = unsafe {
        libsqlite3_sys::sqlite3_db_config(
            db,
            libsqlite3_sys::SQLITE_DBCONFIG_ENABLE_QPSG,
            1 as std::ffi::c_int,
            std::ptr::null_mut::<std::ffi::c_int>(),
        )
    };
    if code != libsqlite3_sys::SQLITE_OK {
        return Err(sea_orm::sqlx::Error::Configuration(
            format!("SQLite refused the query planner stability guarantee (code {code})").into(),
        ));
    }
    Ok(())
}

/// Creates an empty `file` readable by this user only (0600) if it does not exist, so that
/// SQLite, which gives its WAL and shared-memory files the database file's mode, keeps them
/// private too.
fn private_file_create(file: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(file) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

tokio::task_local! {
    /// The idempotency key (credential, key) of the request this task serves, while it runs:
    /// see [`begin_write`].
    pub static IDEMPOTENCY_CLAIM: (String, String);
}

/// Starts a transaction that will write. On SQLite it takes the write lock at once, so that two
/// concurrent writers queue on the busy timeout instead of failing to upgrade a read lock.
///
/// Within a request claimed with an idempotency key ([`IDEMPOTENCY_CLAIM`]), the transaction
/// first marks the claim as having taken effect: the mark commits with the request's writes or
/// not at all, so a request whose commit the database acknowledged while its answer was lost
/// (a primary gone in between) is known to have run, and never runs again.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    let options = TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..Default::default()
    };
    let txn = db.begin_with_options(options).await?;
    if let Ok((credential, key)) = IDEMPOTENCY_CLAIM.try_with(Clone::clone) {
        use sea_orm::sea_query::Expr;
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        crate::entity::idempotency_record::Entity::update_many()
            .col_expr(
                crate::entity::idempotency_record::Column::TookEffect,
                Expr::value(true),
            )
            .filter(crate::entity::idempotency_record::Column::Principal.eq(credential))
            .filter(crate::entity::idempotency_record::Column::Key.eq(key))
            .exec(&txn)
            .await?;
    }
    Ok(txn)
}

/// Locks row `id` of `E` for the rest of `txn` (`FOR UPDATE` on PostgreSQL; SQLite's write
/// transaction holds the whole database already), so that writes which check a count under
/// it (a tenant limit) queue instead of passing it together.
pub async fn row_lock<E: sea_orm::EntityTrait>(
    txn: &DatabaseTransaction,
    id: impl Into<<E::PrimaryKey as sea_orm::PrimaryKeyTrait>::ValueType>,
) -> Result<(), DbErr> {
    use sea_orm::QuerySelect;
    E::find_by_id(id).lock_exclusive().one(txn).await?;
    Ok(())
}

/// Applies every pending migration.
pub async fn migrate_up(db: &DatabaseConnection) -> Result<(), DbErr> {
    Migrator::up(db, None).await
}

/// Names of the migrations not yet applied.
pub async fn pending_migrations(db: &DatabaseConnection) -> Result<Vec<String>, DbErr> {
    Ok(Migrator::get_pending_migrations(db)
        .await?
        .iter()
        .map(|m| m.name().to_owned())
        .collect())
}

/// Checks that the database answers a query.
pub async fn ping(db: &DatabaseConnection) -> Result<(), DbErr> {
    db.execute_unprepared("SELECT 1").await.map(|_| ())
}

/// Open and idle connections of the pool, for `/metrics`.
pub fn pool_stats(db: &DatabaseConnection) -> (u32, usize) {
    match db.get_database_backend() {
        DbBackend::Sqlite => {
            let pool = db.get_sqlite_connection_pool();
            (pool.size(), pool.num_idle())
        }
        DbBackend::Postgres => {
            let pool = db.get_postgres_connection_pool();
            (pool.size(), pool.num_idle())
        }
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the query planner stability guarantee is on for `connection`.
    async fn query_plans_kept(connection: &mut SqliteConnection) -> bool {
        let mut handle = connection.lock_handle().await.unwrap();
        let mut on: std::ffi::c_int = -1;
        // SAFETY: as in `query_plans_keep`; -1 reads the setting into `on`.
        let code = unsafe {
            libsqlite3_sys::sqlite3_db_config(
                handle.as_raw_handle().as_ptr(),
                libsqlite3_sys::SQLITE_DBCONFIG_ENABLE_QPSG,
                -1 as std::ffi::c_int,
                &mut on as *mut std::ffi::c_int,
            )
        };
        assert_eq!(code, libsqlite3_sys::SQLITE_OK);
        on == 1
    }

    #[tokio::test]
    async fn every_sqlite_connection_keeps_its_query_plans() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/test.db", dir.path().display());
        let pool = connect(&url).await.unwrap();
        let pool = pool.get_sqlite_connection_pool();
        // Two connections of the pool, each set up as it opened.
        let mut first = pool.acquire().await.unwrap();
        let mut second = pool.acquire().await.unwrap();
        assert!(query_plans_kept(&mut first).await);
        assert!(query_plans_kept(&mut second).await);
        let dedicated = connect_dedicated(&url).await.unwrap();
        let mut only = dedicated
            .get_sqlite_connection_pool()
            .acquire()
            .await
            .unwrap();
        assert!(query_plans_kept(&mut only).await);
    }
}
