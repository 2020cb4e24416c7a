//! Changes across replicas on PostgreSQL: LISTEN/NOTIFY as a wake-up hint only.
//!
//! - **Telling** ([`App::change_feed_tell_run`]): the kinds changed here ([`Outbox`]) are sent
//!   on the `bulkhead_changes` channel as `"<kind> <replica>"`, a burst in one statement. A
//!   notification carries no data: whoever gets it re-reads what changed from the database,
//!   so a hint that is late, doubled or lost never makes a replica wrong, only late.
//! - **Listening** ([`App::change_feed_listen_run`]): on a connection of its own (not one of
//!   the pool, which recycles its connections), every other replica's hint bumps the topic of
//!   its kind ([`App::change_apply`]). Notifications sent while the connection is down are lost
//!   without a trace, so after every (re)connection everything is re-read as if every kind had
//!   changed; until then the auth cache is not trusted (every request re-reads its credential).
//!
//! On SQLite there is one process per database file in production, and nothing is told; the
//! periodic re-reads of each waiter remain (see [`super::changes`]).

use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, DbBackend, Value};
use tokio::sync::watch;

use super::App;
use super::changes::{Kind, Outbox};
use super::leases::statement;

/// The channel replicas tell each other on.
pub const CHANNEL: &str = "bulkhead_changes";
/// The wait before listening again after the connection dropped, doubling up to the cap.
const RECONNECT_FIRST: Duration = Duration::from_millis(200);
const RECONNECT_CAP: Duration = Duration::from_secs(5);

impl App {
    /// Sends the pending kinds to the other replicas until `stop` turns true (PostgreSQL
    /// only: on SQLite it returns at once).
    pub async fn change_feed_tell_run(self, mut stop: watch::Receiver<bool>) {
        if self.db.get_database_backend() != DbBackend::Postgres {
            return;
        }
        let outbox: &Outbox = &self.changes.outbox;
        loop {
            let kinds = tokio::select! {
                kinds = outbox.take() => kinds,
                _ = stop.wait_for(|stopped| *stopped) => return,
            };
            // One statement for the burst: `SELECT pg_notify($1, $2), pg_notify($1, $3), …`.
            let calls: Vec<String> = (0..kinds.len())
                .map(|i| format!("pg_notify($1, ${})", i + 2))
                .collect();
            let mut values = vec![Value::from(CHANNEL)];
            values.extend(
                kinds
                    .iter()
                    .map(|kind| Value::from(format!("{} {}", kind.as_str(), self.leases.replica))),
            );
            let sent = self
                .db
                .execute_raw(statement(
                    DbBackend::Postgres,
                    &format!("SELECT {}", calls.join(", ")),
                    values,
                ))
                .await;
            if let Err(err) = sent {
                // The others find the change by their periodic re-reads.
                metrics::counter!("change_feed_tell_failures_total").increment(1);
                tracing::warn!(error = %err, "change feed: could not tell the other replicas");
            }
        }
    }

    /// Listens for the other replicas' changes until `stop` turns true (PostgreSQL only).
    pub async fn change_feed_listen_run(self, mut stop: watch::Receiver<bool>) {
        if self.db.get_database_backend() != DbBackend::Postgres {
            return;
        }
        let mut wait = RECONNECT_FIRST;
        loop {
            let listened = tokio::select! {
                listened = self.change_feed_listen(&self.settings.database_url) => listened,
                _ = stop.wait_for(|stopped| *stopped) => return,
            };
            self.changes.listening_set(false);
            self.auth_cache.trust(false);
            metrics::gauge!("change_feed_listening").set(0.0);
            match listened {
                // It was listening: try again at once, then back off.
                Ok(()) => wait = RECONNECT_FIRST,
                Err(err) => {
                    tracing::warn!(error = %err, retry_in_ms = wait.as_millis() as u64, "change feed: not listening");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            wait = (wait * 2).min(RECONNECT_CAP);
        }
    }

    /// One listening connection, until it drops: `Ok` if it was listening, `Err` if it could
    /// not begin to.
    async fn change_feed_listen(&self, url: &str) -> Result<(), sea_orm::sqlx::Error> {
        let mut listener = PgListener::connect(url).await?;
        listener.listen(CHANNEL).await?;
        // Listening from here on: what changed before is read now.
        self.change_feed_resync();
        self.changes.listening_set(true);
        metrics::gauge!("change_feed_listening").set(1.0);
        tracing::info!("change feed: listening");
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => self.change_hint(notification.payload()),
                // The connection dropped (the listener would reconnect by itself; returning
                // makes every reconnection go through the resync above).
                Ok(None) => {
                    tracing::warn!("change feed: the listening connection dropped");
                    return Ok(());
                }
                Err(err) => {
                    tracing::warn!(error = %err, "change feed: the listening connection failed");
                    return Ok(());
                }
            }
        }
    }

    /// Everything re-read as if every kind had changed on another replica; the auth cache
    /// is trusted again from here.
    pub fn change_feed_resync(&self) {
        metrics::counter!("change_feed_resyncs_total").increment(1);
        for kind in Kind::ALL {
            self.change_apply(kind);
        }
        self.auth_cache.trust(true);
    }

    /// A notification's payload: another replica's change is applied, this one's ignored.
    fn change_hint(&self, payload: &str) {
        let (kind, origin) = payload.split_once(' ').unwrap_or((payload, ""));
        if origin == self.leases.replica {
            return;
        }
        match Kind::parse(kind) {
            Some(kind) => {
                metrics::counter!("change_feed_hints_total", "kind" => kind.as_str()).increment(1);
                self.change_apply(kind);
            }
            None => tracing::debug!(payload, "change feed: unknown kind"),
        }
    }

    /// What another replica's change of `kind` means here.
    pub fn change_apply(&self, kind: Kind) {
        if kind == Kind::Auth {
            self.auth_cache.invalidate();
        }
        self.changes.topic(kind).notify_local();
    }
}
