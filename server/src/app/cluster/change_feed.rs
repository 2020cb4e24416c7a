//! Changes across replicas on PostgreSQL: LISTEN/NOTIFY as a wake-up hint only.
//!
//! - **Telling** ([`App::change_feed_tell_run`]): the kinds changed here ([`Outbox`]) are sent
//!   on the `bulkhead_changes` channel as `"<kind> <replica>"`, a burst in one statement; a
//!   change of routes adds the services it concerns (`"routes <replica> <id>,<id>,…"`, in as
//!   many notifications as the payload limit needs). A notification carries no data:
//!   whoever gets it re-reads what changed from the database, so a hint that is late, doubled
//!   or lost never makes a replica wrong, only late.
//! - **Listening** ([`App::change_feed_listen_run`]): on a connection of its own to the
//!   primary (not one of the pool, which recycles its connections; a new one when another
//!   server becomes the primary), every other replica's hint bumps the topic of its kind
//!   ([`App::change_apply`]). Notifications sent while the connection is down are lost
//!   without a trace, so after every (re)connection everything is re-read as if every kind had
//!   changed; until then the auth cache is not trusted (every request re-reads its credential).
//!
//! On SQLite there is one process per database file in production, and nothing is told; the
//! periodic re-reads of each waiter remain (see [`crate::app::cluster::changes`]).

use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, DbBackend, Value};
use tokio::sync::watch;

use crate::app::App;
use crate::app::cluster::changes::{Kind, Outbox, RoutesScope};
use crate::app::cluster::leases::statement;
use crate::db::Primary;
use crate::ids::ServiceId;

/// The channel replicas tell each other on.
pub const CHANNEL: &str = "bulkhead_changes";
/// The wait before listening again after the connection dropped, doubling up to the cap.
const RECONNECT_FIRST: Duration = Duration::from_millis(200);
const RECONNECT_CAP: Duration = Duration::from_secs(5);
/// Services named in one notification (37 bytes each: well under PostgreSQL's 8,000-byte
/// payload).
const SERVICES_PER_HINT: usize = 150;

/// The payloads that tell the other replicas of `kinds` changed by `replica`, with the
/// services whose routes changed.
fn hint_payloads(kinds: &[Kind], replica: &str, routes: Option<RoutesScope>) -> Vec<String> {
    let mut payloads = Vec::new();
    for kind in kinds {
        let plain = format!("{} {replica}", kind.as_str());
        match (kind, &routes) {
            (Kind::Routes, Some(RoutesScope::Services(services))) if !services.is_empty() => {
                let services: Vec<String> = services.iter().map(|id| id.to_string()).collect();
                payloads.extend(
                    services
                        .chunks(SERVICES_PER_HINT)
                        .map(|chunk| format!("{plain} {}", chunk.join(","))),
                );
            }
            _ => payloads.push(plain),
        }
    }
    payloads
}

impl App {
    /// Sends the pending kinds to the other replicas until `stop` turns true (PostgreSQL
    /// only: on SQLite it returns at once).
    pub async fn change_feed_tell_run(&self, mut stop: watch::Receiver<bool>) {
        if self.db.get_database_backend() != DbBackend::Postgres {
            return;
        }
        let outbox: &Outbox = &self.changes.outbox;
        loop {
            let kinds = tokio::select! {
                kinds = outbox.take() => kinds,
                _ = stop.wait_for(|stopped| *stopped) => return,
            };
            let payloads = hint_payloads(&kinds, &self.leases.replica, outbox.routes.take());
            // One statement for the burst: `SELECT pg_notify($1, $2), pg_notify($1, $3), …`.
            let calls: Vec<String> = (0..payloads.len())
                .map(|i| format!("pg_notify($1, ${})", i + 2))
                .collect();
            let mut values = vec![Value::from(CHANNEL)];
            values.extend(payloads.into_iter().map(Value::from));
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
    pub async fn change_feed_listen_run(&self, mut stop: watch::Receiver<bool>) {
        // Only PostgreSQL has a primary to follow.
        let Some(primary) = self.primary.clone() else {
            return;
        };
        let mut primary_changed = primary.subscribe();
        let mut wait = RECONNECT_FIRST;
        loop {
            primary_changed.borrow_and_update();
            let listened = tokio::select! {
                listened = self.change_feed_listen(&primary, &mut primary_changed) => listened,
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
                // A new primary: listen there at once.
                _ = primary_changed.changed() => wait = RECONNECT_FIRST,
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            wait = (wait * 2).min(RECONNECT_CAP);
        }
    }

    /// One listening connection to the primary, until it drops or another server becomes the
    /// primary: `Ok` if it was listening, `Err` if it could not begin to.
    async fn change_feed_listen(
        &self,
        primary: &Primary,
        switched: &mut watch::Receiver<u64>,
    ) -> Result<(), sea_orm::sqlx::Error> {
        let pool = primary.listener_pool().await?;
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.ignore_pool_close_event(true);
        listener.listen(CHANNEL).await?;
        // Listening from here on: what changed before is read now.
        self.change_feed_resync();
        self.changes.listening_set(true);
        metrics::gauge!("change_feed_listening").set(1.0);
        tracing::info!("change feed: listening");
        loop {
            let received = tokio::select! {
                received = listener.try_recv() => received,
                _ = switched.changed() => {
                    tracing::info!("change feed: the database has a new primary; listening there");
                    return Ok(());
                }
            };
            match received {
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
        let mut parts = payload.split(' ');
        let (kind, origin, services) = (parts.next(), parts.next(), parts.next());
        if origin == Some(self.leases.replica.as_str()) {
            return;
        }
        match kind.and_then(Kind::parse) {
            Some(kind) => {
                metrics::counter!("change_feed_hints_total", "kind" => kind.as_str()).increment(1);
                let services: Option<Vec<ServiceId>> = services
                    .filter(|_| kind == Kind::Routes)
                    .and_then(|list| list.split(',').map(|id| id.parse().ok()).collect());
                match services {
                    Some(services) => {
                        self.changes.routes_dirty.mark(services);
                        self.changes.routes.notify_local();
                    }
                    None => self.change_apply(kind),
                }
            }
            None => tracing::debug!(payload, "change feed: unknown kind"),
        }
    }

    /// What another replica's change of `kind` means here (for routes: any may have changed).
    pub fn change_apply(&self, kind: Kind) {
        match kind {
            Kind::Auth => self.auth_cache.invalidate(),
            Kind::Routes => self.changes.routes_dirty.mark_all(),
            _ => {}
        }
        self.changes.topic(kind).notify_local();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn route_hints_name_their_services_within_the_payload_limit() {
        let services: BTreeSet<ServiceId> = (0..400u128)
            .map(|n| ServiceId(uuid::Uuid::from_u128(n)))
            .collect();
        let payloads = hint_payloads(
            &[Kind::Deployments, Kind::Routes],
            "r1",
            Some(RoutesScope::Services(services.clone())),
        );
        assert_eq!(payloads[0], "deployments r1");
        assert_eq!(
            payloads.len(),
            1 + 3,
            "400 services in notifications of 150"
        );
        let mut named = BTreeSet::new();
        for payload in &payloads[1..] {
            assert!(payload.len() < 8000, "{} bytes", payload.len());
            let list = payload.strip_prefix("routes r1 ").unwrap();
            named.extend(list.split(',').map(|id| id.parse::<ServiceId>().unwrap()));
        }
        assert_eq!(named, services);
        assert_eq!(
            hint_payloads(&[Kind::Routes], "r1", Some(RoutesScope::All)),
            ["routes r1"],
            "everything: no names"
        );
    }
}
