//! Following the PostgreSQL primary. A database URL may name several servers, libpq's way
//! (`postgres://bulkhead@db-a:5432,db-b:5432/bulkhead`), of which one at a time accepts
//! writes, or one name that a failover manager moves from server to server. sqlx (under
//! sea-orm) connects to one host and has no `target_session_attrs`, so this module does it:
//!
//! - [`Primary::locate`] asks every server whether it is in recovery and keeps the first that
//!   is not: the primary.
//! - The pools made by [`Primary::pool`] open connections there only. Each new connection
//!   checks `pg_is_in_recovery()` first (a standby's is refused, and the pool tries again), and
//!   after a switch the connections opened before it are discarded as they are next taken.
//! - [`Primary::follow_run`] (the `database_primary` background task) asks the primary every
//!   [`CHECK_EVERY`], on a connection it keeps, whether it still is. When it is gone, answers
//!   as a standby, or restarted, every server is asked every [`SEARCH_EVERY`] until one is the
//!   primary, and every pool is pointed there. Requests meanwhile wait for a connection (up to
//!   [`ACQUIRE_TIMEOUT`], picking up the new server as soon as it is found) or answer 503
//!   `not_ready` (see [`crate::error::database_unreachable`]).
//!
//! Choosing the standby to promote and keeping the old primary down (fencing) are the
//! failover manager's work (Patroni, a managed service): Bulkhead follows whichever server
//! accepts writes. `docs/operations/database-failover.md` says how to run it.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sea_orm::sqlx::{self, ConnectOptions as _, Connection as _};
use sea_orm::{Database, DatabaseConnection};

use super::PoolKind;
use serde::Serialize;
use tokio::sync::watch;
use utoipa::ToSchema;

/// How often the primary is asked whether it still is.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How often every server is asked while no primary is known.
pub const SEARCH_EVERY: Duration = Duration::from_millis(200);
/// How long a request waits for a connection before it answers 503.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a server has to connect and answer whether it is the primary.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a starting server looks for a primary before it gives up.
const LOCATE_FOR: Duration = Duration::from_secs(30);

/// One server a database URL names.
struct Server {
    /// `host:port`, for logs and the status (never credentials).
    label: String,
    /// The URL with this server as its only host.
    url: String,
    options: PgConnectOptions,
}

/// What a server says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    in_recovery: bool,
    /// When its postmaster started: a server that restarted, or another one behind the same
    /// name, answers another time.
    started: String,
}

/// The servers a PostgreSQL database URL names, and which of them this process follows as
/// the primary (see the module's documentation).
pub struct Primary {
    servers: Vec<Server>,
    state: Mutex<State>,
    /// When the pools last changed server: connections opened before are discarded.
    switched_at: Arc<Mutex<Instant>>,
    /// The pools that follow the primary.
    pools: Mutex<Vec<PgPool>>,
    /// Bumped at each switch.
    changed: watch::Sender<u64>,
}

struct State {
    current: usize,
    started: String,
    reachable: bool,
    since: DateTime<Utc>,
    switches: u64,
    last_error: Option<String>,
}

/// Which database server this replica follows as the primary.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DatabasePrimary {
    /// The server (`host:port`) this replica's connections go to.
    pub server: String,
    /// Whether it answered as the primary at the last check (every 0.5 s).
    pub reachable: bool,
    /// Since when this replica follows it.
    pub since: DateTime<Utc>,
    /// How many times this replica changed server since it started.
    pub switches: u64,
    /// Why no server answered as the primary, while none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Every server the database URL names.
    pub servers: Vec<String>,
}

impl Primary {
    /// The servers `url` names and the primary among them, waiting up to 30 s for one to
    /// answer as the primary; `None` for a database that is not PostgreSQL.
    pub async fn locate(url: &str) -> anyhow::Result<Option<Arc<Primary>>> {
        if !is_postgres(url) {
            return Ok(None);
        }
        let servers = servers(url)?;
        let deadline = Instant::now() + LOCATE_FOR;
        let mut said = false;
        let (current, answer) = loop {
            match search(&servers, 0).await {
                Ok(found) => break found,
                Err(why) if Instant::now() < deadline => {
                    if !said {
                        tracing::warn!(servers = %why, "database: no server is the primary yet; waiting");
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(why) => anyhow::bail!(
                    "no database server accepts writes after {} s: {why}",
                    LOCATE_FOR.as_secs()
                ),
            }
        };
        Ok(Some(Arc::new(Primary {
            servers,
            state: Mutex::new(State {
                current,
                started: answer.started,
                reachable: true,
                since: Utc::now(),
                switches: 0,
                last_error: None,
            }),
            switched_at: Arc::new(Mutex::new(Instant::now())),
            pools: Mutex::default(),
            changed: watch::channel(0).0,
        })))
    }

    /// The URL of the server followed now (with this one server as its host).
    pub fn url(&self) -> String {
        let state = self.state.lock().expect("not poisoned");
        self.servers[state.current].url.clone()
    }

    /// A receiver that sees each switch to another server.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Which server is followed, for the status.
    pub fn status(&self) -> DatabasePrimary {
        let state = self.state.lock().expect("not poisoned");
        DatabasePrimary {
            server: self.servers[state.current].label.clone(),
            reachable: state.reachable,
            since: state.since,
            switches: state.switches,
            last_error: state.last_error.clone(),
            servers: self.servers.iter().map(|s| s.label.clone()).collect(),
        }
    }

    /// A pool of `kind` that follows the primary.
    pub async fn pool(&self, kind: PoolKind) -> anyhow::Result<DatabaseConnection> {
        let mut options = super::options(&self.url(), kind)?;
        let switched_at = self.switched_at.clone();
        options.map_sqlx_postgres_before_acquire(move |_, meta| {
            let since_switch = switched_at.lock().expect("not poisoned").elapsed();
            Box::pin(async move { Ok(meta.age <= since_switch) })
        });
        options.map_sqlx_postgres_pool_opts(|pool| {
            pool.after_connect(|connection, _| Box::pin(primary_only(connection)))
        });
        let db = Database::connect(options).await?;
        let pool = db.get_postgres_connection_pool().clone();
        // The primary may have changed while the pool connected.
        let state = self.state.lock().expect("not poisoned");
        pool.set_connect_options(self.servers[state.current].options.clone());
        self.pools.lock().expect("not poisoned").push(pool);
        Ok(db)
    }

    /// A pool of one connection to the primary now, for a listener (which starts again at
    /// each switch, so the pool does not follow).
    pub async fn listener_pool(&self) -> Result<PgPool, sqlx::Error> {
        let options = {
            let state = self.state.lock().expect("not poisoned");
            self.servers[state.current].options.clone()
        };
        PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(PROBE_TIMEOUT)
            .connect_with(options)
            .await
    }

    /// Follows the primary until `stop` turns true.
    pub async fn follow_run(&self, mut stop: watch::Receiver<bool>) {
        let mut kept = None;
        loop {
            let wait = match self.check(&mut kept).await {
                true => CHECK_EVERY,
                false => SEARCH_EVERY,
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
        }
    }

    /// Whether a primary is known after asking the current one (on `kept`, its connection),
    /// and every server when it no longer answers as the primary it was.
    async fn check(&self, kept: &mut Option<PgConnection>) -> bool {
        let (current, started, reachable) = {
            let state = self.state.lock().expect("not poisoned");
            (state.current, state.started.clone(), state.reachable)
        };
        if !reachable {
            // Already looking: every server is asked below, this one with them.
            return self.search_and_switch(current).await;
        }
        let server = &self.servers[current];
        let asked = tokio::time::timeout(PROBE_TIMEOUT, async {
            if kept.is_none() {
                *kept = Some(PgConnection::connect_with(&server.options).await?);
            }
            ask(kept.as_mut().expect("just set")).await
        })
        .await;
        let why = match asked {
            Ok(Ok(answer)) if !answer.in_recovery && answer.started == started => return true,
            Ok(Ok(answer)) if answer.in_recovery => "it is a standby now".to_owned(),
            Ok(Ok(_)) => "it restarted".to_owned(),
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no answer in {} s", PROBE_TIMEOUT.as_secs()),
        };
        *kept = None;
        self.state.lock().expect("not poisoned").reachable = false;
        tracing::warn!(server = %server.label, reason = %why, "database: the primary does not answer as the primary; looking for it");
        self.search_and_switch(current).await
    }

    /// Asks every server, from `current` on; switches to the first that accepts writes.
    async fn search_and_switch(&self, current: usize) -> bool {
        match search(&self.servers, current).await {
            Ok((index, answer)) => {
                let mut state = self.state.lock().expect("not poisoned");
                if index == state.current && answer.started == state.started {
                    // The same server, not restarted: it was out of reach for a while.
                    tracing::info!(server = %self.servers[index].label, "database: the primary answers again");
                    state.reachable = true;
                    state.last_error = None;
                    return true;
                }
                drop(state);
                self.switch(index, answer);
                true
            }
            Err(why) => {
                let mut state = self.state.lock().expect("not poisoned");
                state.last_error = Some(why);
                false
            }
        }
    }

    /// Points every pool at server `index`, which answered `answer`.
    fn switch(&self, index: usize, answer: Answer) {
        let mut state = self.state.lock().expect("not poisoned");
        let from = self.servers[state.current].label.clone();
        state.current = index;
        state.started = answer.started;
        state.reachable = true;
        state.since = Utc::now();
        state.switches += 1;
        state.last_error = None;
        let options = &self.servers[index].options;
        for pool in self.pools.lock().expect("not poisoned").iter() {
            pool.set_connect_options(options.clone());
        }
        *self.switched_at.lock().expect("not poisoned") = Instant::now();
        drop(state);
        metrics::counter!("database_primary_switches_total").increment(1);
        tracing::warn!(from = %from, to = %self.servers[index].label, "database: following the new primary");
        self.changed.send_modify(|n| *n += 1);
    }
}

/// Refuses a new connection to a server in recovery (a standby: it would refuse every write).
async fn primary_only(connection: &mut PgConnection) -> Result<(), sqlx::Error> {
    if ask(connection).await?.in_recovery {
        return Err(sqlx::Error::Protocol(
            "the server is a standby (in recovery), not the primary".into(),
        ));
    }
    Ok(())
}

async fn ask(connection: &mut PgConnection) -> Result<Answer, sqlx::Error> {
    let (in_recovery, started): (bool, String) =
        sqlx::query_as("SELECT pg_is_in_recovery(), pg_postmaster_start_time()::text")
            .fetch_one(connection)
            .await?;
    Ok(Answer {
        in_recovery,
        started,
    })
}

/// Asks `server` on a connection of its own.
async fn probe(server: &Server) -> Result<Answer, String> {
    let asked = tokio::time::timeout(PROBE_TIMEOUT, async {
        let mut connection = PgConnection::connect_with(&server.options).await?;
        let answer = ask(&mut connection).await;
        let _ = connection.close().await;
        answer
    })
    .await;
    match asked {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer in {} s", PROBE_TIMEOUT.as_secs())),
    }
}

/// Asks every server at once; the primary is the first not in recovery, from `first` on in
/// the URL's order. Else what each said.
async fn search(servers: &[Server], first: usize) -> Result<(usize, Answer), String> {
    let answers = futures_util::future::join_all(servers.iter().map(probe)).await;
    let order = (first..servers.len()).chain(0..first);
    for index in order {
        if let Ok(answer) = &answers[index]
            && !answer.in_recovery
        {
            return Ok((index, answer.clone()));
        }
    }
    Err(servers
        .iter()
        .zip(answers)
        .map(|(server, answer)| match answer {
            Ok(_) => format!("{}: a standby", server.label),
            Err(err) => format!("{}: {err}", server.label),
        })
        .collect::<Vec<_>>()
        .join("; "))
}

/// Whether `url` is a PostgreSQL one.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Each server of a PostgreSQL URL, as a URL of its own.
fn servers(url: &str) -> anyhow::Result<Vec<Server>> {
    host_urls(url)?
        .into_iter()
        .map(|(label, url)| {
            let options = PgConnectOptions::from_str(&url)
                .map_err(|err| anyhow::anyhow!("the database URL for {label}: {err}"))?
                .disable_statement_logging();
            Ok(Server {
                label,
                url,
                options,
            })
        })
        .collect()
}

/// Splits libpq's multi-host form, `postgres://user:password@a:5432,b:5433/db?params`, into
/// one URL per host (same user, database and parameters), with each host's `host:port`.
/// `target_session_attrs` and `load_balance_hosts` are dropped: Bulkhead always wants the
/// server that accepts writes, and asks for it itself.
pub fn host_urls(url: &str) -> anyhow::Result<Vec<(String, String)>> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| anyhow::anyhow!("the database URL has no scheme"))?;
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|pair| {
                    let key = pair.split('=').next().unwrap_or_default();
                    !matches!(key, "target_session_attrs" | "load_balance_hosts")
                })
                .collect();
            match kept.is_empty() {
                true => path.to_owned(),
                false => format!("{path}?{}", kept.join("&")),
            }
        }
        None => tail.to_owned(),
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    anyhow::ensure!(
        hosts.iter().all(|host| !host.is_empty()),
        "the database URL names an empty host"
    );
    Ok(hosts
        .into_iter()
        .map(|host| {
            let has_port = host.rsplit_once(':').is_some_and(|(_, port)| {
                !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
            }) && !host.ends_with(']');
            let label = match has_port {
                true => host.to_owned(),
                false => format!("{host}:5432"),
            };
            (label, format!("{scheme}://{userinfo}{host}{tail}"))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_several_hosts_gives_one_url_per_host() {
        let urls = host_urls(
            "postgres://bulkhead:p%40ss@db-a:5433,db-b,[::1]:5434/control?sslmode=prefer&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            urls,
            [
                (
                    "db-a:5433".to_owned(),
                    "postgres://bulkhead:p%40ss@db-a:5433/control?sslmode=prefer".to_owned()
                ),
                (
                    "db-b:5432".to_owned(),
                    "postgres://bulkhead:p%40ss@db-b/control?sslmode=prefer".to_owned()
                ),
                (
                    "[::1]:5434".to_owned(),
                    "postgres://bulkhead:p%40ss@[::1]:5434/control?sslmode=prefer".to_owned()
                ),
            ]
        );
        assert_eq!(
            host_urls("postgresql://localhost/db?target_session_attrs=primary").unwrap(),
            [(
                "localhost:5432".to_owned(),
                "postgresql://localhost/db".to_owned()
            )]
        );
        assert!(host_urls("postgres://a,,b/db").is_err());
        // The label never carries the password.
        assert!(urls.iter().all(|(label, _)| !label.contains("ss")));
    }
}
