//! Change notifications inside one server: a counter per topic, bumped after each change is
//! committed, that event streams and background loops wait on instead of polling the database
//! in a tight loop. Other replicas' changes are not seen here; whoever waits also re-reads
//! periodically.

use std::sync::Arc;

use tokio::sync::watch;

/// The changes of one topic.
#[derive(Clone)]
pub struct Topic(Arc<watch::Sender<u64>>);

impl Default for Topic {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl Topic {
    /// Tells every waiter that something changed (call after the commit).
    pub fn notify(&self) {
        self.0.send_modify(|count| *count = count.wrapping_add(1));
    }

    /// A receiver that sees the next change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// The topics of a server.
#[derive(Clone, Default)]
pub struct Changes {
    /// Deployments, their instances and events.
    pub deployments: Topic,
    /// What routing tables are made of: domains, and instances' states and health.
    pub routes: Topic,
}
