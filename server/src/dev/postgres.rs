//! PostgreSQL servers of this process's own, for the tests that stop them, `bulkhead drill
//! --database-failover` and the failover bench: [`PostgresServer`], one cluster on a port of
//! its own, and [`ReplicatedPostgres`], a primary and a standby made from it with
//! `pg_basebackup`, synchronous (`synchronous_standby_names = '*'`: a commit is acknowledged
//! once the standby has it on disk) or asynchronous. [`ReplicatedPostgres::primary_kill`] stops
//! the primary as a crash would and [`ReplicatedPostgres::standby_promote`] promotes the
//! standby as a failover manager (Patroni) would, with `pg_ctl promote`.
//!
//! Uses PostgreSQL's server programs (`initdb`, `pg_ctl`, `pg_basebackup`: Debian's
//! `postgresql` package puts them in `/usr/lib/postgresql/<version>/bin`). PostgreSQL refuses
//! to run as root: as root, they run as the `postgres` user (`runuser`), which then owns the
//! servers' directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sea_orm::sqlx::postgres::PgConnection;
use sea_orm::sqlx::{self, Connection as _};

use super::caddy::free_port;

/// How to get PostgreSQL's server programs when they are missing.
pub const POSTGRES_INSTALL_HINT: &str = "install PostgreSQL's server programs (initdb, \
    pg_ctl, pg_basebackup): `apt-get install postgresql` on Debian and Ubuntu; or set \
    BULKHEAD_POSTGRES_BIN to the directory that holds them";

/// Whether a commit waits for the standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// Acknowledged once the standby has flushed it: a failover loses no acknowledged commit.
    Synchronous,
    /// Acknowledged once the primary has it: the last commits may be lost in a failover.
    Asynchronous,
}

/// The database the servers hold for Bulkhead.
pub const DATABASE: &str = "bulkhead";

/// How [`PostgresServer::stop`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Every session ended, a checkpoint written (a planned restart).
    Fast,
    /// As a crash would: no checkpoint, every connection cut (recovery at the next start).
    Immediate,
}

/// One PostgreSQL server of this process's own (a cluster: its data directory, its port on
/// 127.0.0.1), stopped when dropped.
pub struct PostgresServer {
    bin: PathBuf,
    /// Holds the data directory (`<name>`), the log (`<name>.log`) and the socket.
    dir: PathBuf,
    name: String,
    port: u16,
    /// `postgres` when this process runs as root.
    user: Option<&'static str>,
}

impl PostgresServer {
    /// Makes a new cluster `name` in `dir` (created, and owned by the servers' user) and
    /// starts it. It can be a primary of replication (`wal_level = replica`), without a
    /// synchronous standby yet.
    pub async fn create(dir: &Path, name: &str) -> anyhow::Result<Self> {
        let server = Self::unstarted(dir, name).await?;
        run(
            server.command("initdb").arg("-D").arg(server.data()).args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]),
            "initdb",
        )
        .await?;
        append(
            &server.data().join("postgresql.conf"),
            &format!(
                "\n# bulkhead::dev::postgres\nlisten_addresses = '127.0.0.1'\n\
                 unix_socket_directories = '{}'\nwal_level = replica\nmax_wal_senders = 4\n\
                 max_connections = 300\nshared_buffers = 64MB\nwal_keep_size = 256MB\n\
                 synchronous_commit = on\nsynchronous_standby_names = ''\n",
                server.dir.display()
            ),
        )?;
        server.start().await?;
        Ok(server)
    }

    /// Makes a standby `name` of `primary` in the same directory, by `pg_basebackup`, and
    /// starts it.
    pub async fn standby_of(primary: &PostgresServer, name: &str) -> anyhow::Result<Self> {
        let server = Self::unstarted(&primary.dir, name).await?;
        run(
            server
                .command("pg_basebackup")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                ])
                .args(["-p", &primary.port.to_string(), "-R", "-D"])
                .arg(server.data()),
            "pg_basebackup",
        )
        .await?;
        // Alone after a promotion, it must not wait for a standby of its own: it runs
        // asynchronously until another one joins (Patroni does the same).
        append(
            &server.data().join("postgresql.conf"),
            "\nsynchronous_standby_names = ''\n",
        )?;
        server.start().await?;
        Ok(server)
    }

    async fn unstarted(dir: &Path, name: &str) -> anyhow::Result<Self> {
        let bin = postgres_bin()?;
        let user = running_as_root().then_some("postgres");
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        if let Some(user) = user {
            // The servers' user must reach the directory and own it.
            if let Some(parent) = dir.parent() {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(parent)?.permissions().mode();
                std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode | 0o011))?;
            }
            run(
                Command::new("chown").arg(format!("{user}:")).arg(&dir),
                "chown",
            )
            .await?;
        }
        Ok(Self {
            bin,
            dir,
            name: name.to_owned(),
            port: free_port()?,
            user,
        })
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `database` on this server alone.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Its log.
    pub fn log(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.name))
    }

    /// Starts it, waiting until it accepts connections.
    pub async fn start(&self) -> anyhow::Result<()> {
        run(
            self.command("pg_ctl")
                .args(["start", "-w", "-t", "60", "-D"])
                .arg(self.data())
                .args(["-o", &format!("-p {}", self.port), "-l"])
                .arg(self.log()),
            "pg_ctl start",
        )
        .await
    }

    /// Stops it.
    pub async fn stop(&self, mode: StopMode) -> anyhow::Result<()> {
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        run(
            self.command("pg_ctl")
                .args(["stop", "-w", "-m", mode, "-D"])
                .arg(self.data()),
            "pg_ctl stop",
        )
        .await
    }

    /// Promotes this standby, waiting until it accepts writes.
    pub async fn promote(&self) -> anyhow::Result<()> {
        run(
            self.command("pg_ctl")
                .args(["promote", "-w", "-D"])
                .arg(self.data()),
            "pg_ctl promote",
        )
        .await
    }

    /// A connection to its `postgres` database.
    pub async fn admin(&self) -> anyhow::Result<PgConnection> {
        Ok(PgConnection::connect(&self.url("postgres")).await?)
    }

    fn data(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        match self.user {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.data().join("postmaster.pid").exists() {
            let _ = self
                .command("pg_ctl")
                .args(["stop", "-m", "immediate", "-D"])
                .arg(self.data())
                .output();
        }
    }
}

/// A primary and its standby, each stopped when dropped.
pub struct ReplicatedPostgres {
    pub primary: PostgresServer,
    pub standby: PostgresServer,
}

impl ReplicatedPostgres {
    /// Makes and starts the two servers in `dir`, with [`DATABASE`] made on them, and waits
    /// until the standby streams (and with `Synchronous`, until commits wait for it).
    pub async fn start(dir: &Path, replication: Replication) -> anyhow::Result<Self> {
        let primary = PostgresServer::create(dir, "primary").await?;
        let mut admin = primary.admin().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
            .execute(&mut admin)
            .await?;
        let standby = PostgresServer::standby_of(&primary, "standby").await?;
        // Synchronous only now: with no standby, every commit (`CREATE DATABASE` above) would
        // wait for one. `ALTER SYSTEM` after the base backup: the standby keeps ''.
        if replication == Replication::Synchronous {
            sqlx::raw_sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
                .execute(&mut admin)
                .await?;
            sqlx::raw_sql("SELECT pg_reload_conf()")
                .execute(&mut admin)
                .await?;
        }
        let wanted = match replication {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state: Option<(String, String)> =
                sqlx::query_as("SELECT state, sync_state FROM pg_stat_replication")
                    .fetch_optional(&mut admin)
                    .await?;
            if state
                .as_ref()
                .is_some_and(|(state, sync)| state == "streaming" && sync == wanted)
            {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the standby is not streaming ({wanted}) after 30 s: {state:?}; see {}",
                standby.log().display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = admin.close().await;
        Ok(Self { primary, standby })
    }

    /// Bulkhead's database URL naming both servers, primary first (libpq's multi-host form).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{DATABASE}",
            self.primary.port, self.standby.port
        )
    }

    /// Stops the primary as a crash would.
    pub async fn primary_kill(&self) -> anyhow::Result<()> {
        self.primary.stop(StopMode::Immediate).await
    }

    /// Promotes the standby as a failover manager would, waiting until it accepts writes.
    pub async fn standby_promote(&self) -> anyhow::Result<()> {
        self.standby.promote().await
    }
}

/// Runs `command`, an error with its output when it fails.
async fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let mut command = std::mem::replace(command, Command::new("true"));
    let output = tokio::task::spawn_blocking(move || command.output())
        .await?
        .map_err(|err| anyhow::anyhow!("cannot run {what} ({err}): {POSTGRES_INSTALL_HINT}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim(),
        String::from_utf8_lossy(&output.stdout).trim()
    );
    Ok(())
}

fn append(file: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(file)?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// The server programs used here.
const PROGRAMS: [&str; 3] = ["initdb", "pg_ctl", "pg_basebackup"];

/// The directory of PostgreSQL's server programs: `BULKHEAD_POSTGRES_BIN`, the `PATH`, or
/// Debian's newest `/usr/lib/postgresql/<version>/bin`.
pub fn postgres_bin() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("BULKHEAD_POSTGRES_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let complete = |dir: &Path| PROGRAMS.iter().all(|program| dir.join(program).is_file());
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(dir) = std::env::split_paths(&path).find(|dir| complete(dir)) {
        return Ok(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            complete(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        anyhow::anyhow!(
            "no directory with initdb, pg_ctl and pg_basebackup: {POSTGRES_INSTALL_HINT}"
        )
    })
}
