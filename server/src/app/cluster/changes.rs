//! Change notifications: a counter per topic, bumped after each change is committed, that
//! event streams and background loops wait on instead of polling the database in a tight loop.
//!
//! A change made here wakes this server's waiters at once and is marked in the [`Outbox`];
//! on PostgreSQL, [`crate::app::cluster::change_feed`] tells the other replicas (a hint only: they re-read
//! what changed) and bumps their topics. Whoever waits also re-reads periodically, for the
//! changes a hint never brought (SQLite, a dropped listening connection).
//!
//! Changes of routes also say whose: [`Changes::routes_changed`] names the services whose
//! routes may differ ([`RoutesDirty`]), here and in the hint to the other replicas, so that
//! the routing table looks at those alone. A change that names nothing, or a hint that came
//! without names, makes it look at everything.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::ids::ServiceId;

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

/// Services tracked by name at most; past them, everything counts as changed.
const ROUTES_DIRTY_MAX: usize = 10_000;

/// What the routing table must look at again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutesScope {
    /// The routes of these services (their domains, and the domains that were theirs).
    Services(BTreeSet<ServiceId>),
    /// Every route.
    All,
}

/// The services whose routes may have changed and were not looked at yet.
#[derive(Debug, Default)]
pub struct RoutesDirty(Mutex<Option<RoutesScope>>);

impl RoutesDirty {
    /// Marks `services`; past [`ROUTES_DIRTY_MAX`] of them, everything.
    pub fn mark(&self, services: impl IntoIterator<Item = ServiceId>) {
        let mut dirty = self.0.lock().expect("not poisoned");
        let scope = dirty.get_or_insert_with(|| RoutesScope::Services(BTreeSet::new()));
        if let RoutesScope::Services(marked) = scope {
            marked.extend(services);
            if marked.len() > ROUTES_DIRTY_MAX {
                *scope = RoutesScope::All;
            }
        }
    }

    pub fn mark_all(&self) {
        *self.0.lock().expect("not poisoned") = Some(RoutesScope::All);
    }

    /// Takes what was marked, if anything.
    pub fn take(&self) -> Option<RoutesScope> {
        self.0.lock().expect("not poisoned").take()
    }
}

/// The kinds changed here and not yet told to the other replicas: a burst of changes of one
/// kind is told once (with the services whose routes changed, for routes).
#[derive(Default)]
pub struct Outbox {
    pending: AtomicU32,
    wake: Notify,
    pub routes: RoutesDirty,
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
    /// The services whose routes changed, for the routing table of this server.
    pub routes_dirty: Arc<RoutesDirty>,
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
            routes_dirty: Arc::default(),
            listening: Arc::default(),
        }
    }
}

impl Changes {
    /// The routes of `services` may have changed (call after the commit): the routing table
    /// looks at them again, here and on the other replicas.
    pub fn routes_changed(&self, services: impl IntoIterator<Item = ServiceId>) {
        let services: Vec<ServiceId> = services.into_iter().collect();
        self.routes_dirty.mark(services.iter().copied());
        self.outbox.routes.mark(services);
        self.routes.notify();
    }

    /// Any route may have changed (call after the commit): the routing table looks at all of
    /// them again, here and on the other replicas.
    pub fn routes_all_changed(&self) {
        self.routes_dirty.mark_all();
        self.outbox.routes.mark_all();
        self.routes.notify();
    }

    /// Whether this server hears the other replicas' changes now (see `change_feed`).
    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    pub(crate) fn listening_set(&self, listening: bool) {
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

    #[tokio::test]
    async fn route_changes_name_their_services_until_there_are_too_many() {
        let changes = Changes::default();
        let (a, b) = (
            ServiceId(uuid::Uuid::from_u128(1)),
            ServiceId(uuid::Uuid::from_u128(2)),
        );
        changes.routes_changed([a]);
        changes.routes_changed([b, a]);
        let named = Some(RoutesScope::Services(BTreeSet::from([a, b])));
        assert_eq!(changes.routes_dirty.take(), named);
        assert_eq!(changes.routes_dirty.take(), None, "taken once");
        assert_eq!(changes.outbox.routes.take(), named, "told to the others");
        assert_eq!(changes.outbox.take().await, [Kind::Routes]);
        changes.routes_changed([a]);
        changes.routes_all_changed();
        changes.routes_changed([b]);
        assert_eq!(changes.routes_dirty.take(), Some(RoutesScope::All));
        changes.routes_changed(
            (0..=ROUTES_DIRTY_MAX as u128).map(|n| ServiceId(uuid::Uuid::from_u128(n))),
        );
        assert!(matches!(
            changes.routes_dirty.take(),
            Some(RoutesScope::All)
        ));
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(Kind::parse("nonsense"), None);
    }
}
