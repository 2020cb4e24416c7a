//! Change notifications: a counter per topic, bumped after each change is committed, that
//! event streams and background loops wait on instead of polling the database in a tight loop.
//!
//! A change made here wakes this server's waiters at once and is marked in the [`Outbox`];
//! on PostgreSQL, [`super::change_feed`] tells the other replicas (a hint only: they re-read
//! what changed) and bumps their topics. Whoever waits also re-reads periodically, for the
//! changes a hint never brought (SQLite, a dropped listening connection).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use tokio::sync::{Notify, watch};

/// The kinds of change that replicas tell each other about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Deployments, their instances and events.
    Deployments,
    /// What routing tables are made of: domains, and instances' states and health.
    Routes,
    /// A routing revision was published.
    Routing,
    /// Something that can narrow what a credential may do or see (see `auth_cache`).
    Auth,
    /// A provider's plugin, settings or health.
    Providers,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Deployments,
        Kind::Routes,
        Kind::Routing,
        Kind::Auth,
        Kind::Providers,
    ];

    /// Its name in a notification's payload.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Deployments => "deployments",
            Kind::Routes => "routes",
            Kind::Routing => "routing",
            Kind::Auth => "auth",
            Kind::Providers => "providers",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    const fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// The kinds changed here and not yet told to the other replicas: a burst of changes of one
/// kind is told once.
#[derive(Default)]
pub struct Outbox {
    pending: AtomicU32,
    wake: Notify,
}

impl Outbox {
    fn mark(&self, kind: Kind) {
        self.pending.fetch_or(kind.bit(), Ordering::AcqRel);
        self.wake.notify_one();
    }

    /// Waits until some kind is pending, and takes every pending kind.
    pub async fn take(&self) -> Vec<Kind> {
        loop {
            let pending = self.pending.swap(0, Ordering::AcqRel);
            if pending != 0 {
                return Kind::ALL
                    .into_iter()
                    .filter(|kind| pending & kind.bit() != 0)
                    .collect();
            }
            self.wake.notified().await;
        }
    }
}

/// The changes of one topic.
#[derive(Clone)]
pub struct Topic {
    counter: Arc<watch::Sender<u64>>,
    kind: Kind,
    outbox: Arc<Outbox>,
}

impl Topic {
    fn new(kind: Kind, outbox: &Arc<Outbox>) -> Self {
        Self {
            counter: Arc::new(watch::channel(0).0),
            kind,
            outbox: outbox.clone(),
        }
    }

    /// Tells every waiter, here and on the other replicas, that something changed (call
    /// after the commit).
    pub fn notify(&self) {
        self.notify_local();
        self.outbox.mark(self.kind);
    }

    /// Tells the other replicas only: what changed here is already applied here.
    pub fn notify_others(&self) {
        self.outbox.mark(self.kind);
    }

    /// Tells this server's waiters only (another replica's change, or a resync).
    pub fn notify_local(&self) {
        self.counter
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// A receiver that sees the next change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.counter.subscribe()
    }
}

/// The topics of a server.
#[derive(Clone)]
pub struct Changes {
    /// Deployments, their instances and events.
    pub deployments: Topic,
    /// What routing tables are made of: domains, and instances' states and health.
    pub routes: Topic,
    /// Routing revisions published.
    pub routing: Topic,
    /// Changes that narrow access (the auth cache is dropped on each).
    pub auth: Topic,
    /// Providers' plugins, settings and health.
    pub providers: Topic,
    pub outbox: Arc<Outbox>,
    /// Whether the change feed listens to the other replicas now.
    listening: Arc<AtomicBool>,
}

impl Default for Changes {
    fn default() -> Self {
        let outbox = Arc::new(Outbox::default());
        Self {
            deployments: Topic::new(Kind::Deployments, &outbox),
            routes: Topic::new(Kind::Routes, &outbox),
            routing: Topic::new(Kind::Routing, &outbox),
            auth: Topic::new(Kind::Auth, &outbox),
            providers: Topic::new(Kind::Providers, &outbox),
            outbox,
            listening: Arc::default(),
        }
    }
}

impl Changes {
    /// Whether this server hears the other replicas' changes now (see `change_feed`).
    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    pub(super) fn listening_set(&self, listening: bool) {
        self.listening.store(listening, Ordering::Release);
    }

    pub fn topic(&self, kind: Kind) -> &Topic {
        match kind {
            Kind::Deployments => &self.deployments,
            Kind::Routes => &self.routes,
            Kind::Routing => &self.routing,
            Kind::Auth => &self.auth,
            Kind::Providers => &self.providers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_of_changes_is_told_once_per_kind() {
        let changes = Changes::default();
        let mut routes = changes.routes.subscribe();
        for _ in 0..3 {
            changes.routes.notify();
        }
        changes.auth.notify();
        changes.deployments.notify_local();
        assert!(routes.has_changed().unwrap(), "local waiters wake at once");
        routes.borrow_and_update();
        assert_eq!(changes.outbox.take().await, [Kind::Routes, Kind::Auth]);
        // A local-only notification is never told to other replicas.
        changes.routing.notify();
        assert_eq!(changes.outbox.take().await, [Kind::Routing]);
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(Kind::parse("nonsense"), None);
    }
}
