//! The kept-alive connections of one provider's plugin calls: a request whose destination
//! (`host:port`, TLS or not) has an idle connection left by an earlier request reuses it
//! instead of resolving, connecting and shaking hands again.
//!
//! A connection enters the pool only once its response has been read to its end (hyper's
//! sender is ready again) and while its call still runs; a call that ends mid-response closes
//! it. Idle connections are not driven (no task of the host holds them): before reuse one is
//! polled once to see whether its server closed it meanwhile, and one idle longer than
//! [`IDLE_FOR`] is closed. A request that could not be written to a reused connection (its
//! server closed it at that very moment) is sent on a new one.
//!
//! The pool belongs to the provider's settings ([`super::PluginEnv`]): when they change (the
//! allowlist, the endpoints, the pinned certificates), the pool goes with them, so every
//! connection was opened under the rules in force. A new connection is always checked as
//! before: the name against the allowlist, the address it resolves to, cleartext to loopback
//! only. Every request, reused connection or not, is checked against the allowlist by name.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use wasmtime_wasi_http::{Error as HttpError, WasiBody};

/// How long a connection may sit idle before it is closed rather than reused (below the
/// idle timeouts of common servers and load balancers, 60 s and more).
pub const IDLE_FOR: Duration = Duration::from_secs(30);
/// Idle connections kept per destination (a provider's calls run at most 16 at once).
const IDLE_PER_DESTINATION: usize = 16;

/// The HTTP/1.1 connection of a request, to be driven until it closes.
pub(super) type Connection = Pin<Box<dyn Future<Output = Result<(), HttpError>> + Send>>;
pub(super) type Sender = hyper::client::conn::http1::SendRequest<WasiBody>;

/// Where a connection goes: connections are shared only by requests to the same place.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Destination {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

struct Idle {
    sender: Sender,
    connection: Connection,
    since: Instant,
}

/// A provider's idle connections, by destination.
#[derive(Default)]
pub struct ConnectionPool {
    idle: Mutex<HashMap<Destination, Vec<Idle>>>,
}

impl std::fmt::Debug for ConnectionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionPool")
            .field("idle", &self.idle_count())
            .finish()
    }
}

impl ConnectionPool {
    /// An idle connection to `destination` still open, the most recently used first.
    pub(super) fn take(&self, destination: &Destination) -> Option<(Sender, Connection)> {
        let mut idle = self.idle.lock().expect("not poisoned");
        let kept = idle.get_mut(destination)?;
        while let Some(mut candidate) = kept.pop() {
            if candidate.since.elapsed() > IDLE_FOR || candidate.sender.is_closed() {
                continue;
            }
            // A server that closed the connection has been seen by now: the connection's
            // future ends at once when polled.
            let mut cx = Context::from_waker(Waker::noop());
            if candidate.connection.as_mut().poll(&mut cx).is_ready() {
                continue;
            }
            if !candidate.sender.is_ready() {
                continue;
            }
            return Some((candidate.sender, candidate.connection));
        }
        None
    }

    /// Keeps a connection whose response was read to its end, for the next request.
    pub(super) fn put(&self, destination: Destination, sender: Sender, connection: Connection) {
        let mut idle = self.idle.lock().expect("not poisoned");
        let kept = idle.entry(destination).or_default();
        kept.retain(|old| old.since.elapsed() <= IDLE_FOR);
        if kept.len() < IDLE_PER_DESTINATION {
            kept.push(Idle {
                sender,
                connection,
                since: Instant::now(),
            });
        }
    }

    /// Idle connections kept, every destination together.
    pub fn idle_count(&self) -> usize {
        self.idle
            .lock()
            .expect("not poisoned")
            .values()
            .map(Vec::len)
            .sum()
    }
}

/// A connection lent to one request: driven while its response comes, and given back to the
/// pool as soon as it can take another request.
///
/// The plugin runtime drops the future that drives it with the response, once the plugin has
/// read the body, often before that future has seen the connection become ready again, and
/// the plugin's next request comes at once. So the end of the body gives it back too
/// ([`Lent::body_ended`]: the response's body calls it when it has delivered its last byte),
/// and so does the end of the lending, without waiting. A connection whose body was left
/// unread is never ready again and is closed.
pub(super) struct Lent {
    pool: Arc<ConnectionPool>,
    destination: Destination,
    state: Mutex<LentState>,
}

#[derive(Default)]
struct LentState {
    kept: Option<(Sender, Connection)>,
    /// The waker of the future that drives it (a poll from elsewhere must not replace it).
    driver: Option<Waker>,
}

impl Lent {
    pub(super) fn new(
        pool: Arc<ConnectionPool>,
        destination: Destination,
        sender: Sender,
        connection: Connection,
    ) -> Arc<Self> {
        Arc::new(Self {
            pool,
            destination,
            state: Mutex::new(LentState {
                kept: Some((sender, connection)),
                driver: None,
            }),
        })
    }

    /// Drives the connection until it is given back or closes.
    pub(super) async fn drive(self: Arc<Self>) -> Result<(), HttpError> {
        std::future::poll_fn(|cx| {
            let mut state = self.state.lock().expect("not poisoned");
            state.driver = Some(cx.waker().clone());
            self.advance(&mut state, cx)
        })
        .await
    }

    /// The response's body delivered its last byte: the connection goes back now if it can.
    pub(super) fn body_ended(&self) {
        let mut state = self.state.lock().expect("not poisoned");
        let waker = state
            .driver
            .clone()
            .unwrap_or_else(|| Waker::noop().clone());
        let _ = self.advance(&mut state, &mut Context::from_waker(&waker));
    }

    /// Polls the connection: `Ready` once it is back in the pool or closed.
    fn advance(&self, state: &mut LentState, cx: &mut Context<'_>) -> Poll<Result<(), HttpError>> {
        let Some((sender, connection)) = state.kept.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        if let Poll::Ready(ended) = connection.as_mut().poll(cx) {
            state.kept = None;
            return Poll::Ready(ended);
        }
        match sender.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                let (sender, connection) = state.kept.take().expect("checked");
                self.pool.put(self.destination.clone(), sender, connection);
                Poll::Ready(Ok(()))
            }
            // Closed: nothing to keep.
            Poll::Ready(Err(_)) => {
                state.kept = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let mut state = std::mem::take(self.state.get_mut().expect("not poisoned"));
        if state.kept.is_some() {
            let _ = self.advance(&mut state, &mut Context::from_waker(Waker::noop()));
        }
    }
}
