//! The database connection: opening SQLite (created if missing) or PostgreSQL, running
//! migrations, and the checks behind `/readyz`.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use bulkhead_migrations::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

/// Opens the database at `url`. For SQLite, the file and its directory are created if missing,
/// and the database runs in WAL mode so that readers never wait for the writer.
pub async fn connect(url: &str) -> anyhow::Result<DatabaseConnection> {
    connect_with_pool(url, if url.starts_with("sqlite:") { 8 } else { 16 }).await
}

/// Opens the database with a single connection, for running migrations. SQLite checks a DDL
/// statement against the schema its connection cached; on a pool, `DROP COLUMN` after an
/// `ADD COLUMN` made on another connection fails with "no such column" (seen in the
/// up-down-up migration tests). One connection sees its own changes.
pub async fn connect_for_migrations(url: &str) -> anyhow::Result<DatabaseConnection> {
    connect_with_pool(url, 1).await
}

async fn connect_with_pool(url: &str, max_connections: u32) -> anyhow::Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url);
    // Pinging a connection on every checkout costs a round trip per query; pinging only
    // connections idle for a while still catches the ones a server or proxy dropped.
    options
        .sqlx_logging(false)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire_if_idle_for(Duration::from_secs(30));
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
        });
    }
    options.max_connections(max_connections);
    Ok(Database::connect(options).await?)
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

/// Starts a transaction that will write. On SQLite it takes the write lock at once, so that two
/// concurrent writers queue on the busy timeout instead of failing to upgrade a read lock.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    let options = TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..Default::default()
    };
    db.begin_with_options(options).await
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
