//! Simulated instances are real: each one serves HTTP on its own loopback address (Linux
//! routes all of 127.0.0.0/8 to the loopback interface), on the port its workload asked for,
//! answering every request with its id, with status 200 until a test makes it answer another
//! ([`InstanceServer::answer_with`]: a sick instance, for health checks). So an instance's address looks like a cloud's
//! (`ip:port`, the port the workload listens on), and routing and health checks reach it.
//!
//! A process walks the addresses from a random start: simulators in several processes on one
//! machine (tests run side by side) would otherwise all start at the same address, and one
//! process's new instance would take an address another's deleted instance had — where that
//! other's edge may still send the deleted instance's traffic. (The drill saw exactly that:
//! `web-2.drill.test` answered by another drill's `web-1`.) Clouds recycle addresses too, but
//! far more slowly than these tests do.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How many loopback addresses instances take from: 127.100.0.1 .. 127.255.255.254, clear of
/// 127.0.0.1 and its neighbours.
const ADDRESSES: u32 = 155 << 16;

/// The next address to try, as an offset from 127.100.0.1 (process-wide, so that two
/// simulators of one process never share one), starting at a random offset.
static NEXT: LazyLock<AtomicU32> = LazyLock::new(|| {
    let mut start = [0; 4];
    getrandom::fill(&mut start).expect("the system's random numbers");
    AtomicU32::new(u32::from_le_bytes(start) % ADDRESSES)
});

/// A running simulated instance.
pub struct InstanceServer {
    pub addr: SocketAddr,
    /// The status it answers every request with.
    status: Arc<AtomicU16>,
    task: JoinHandle<()>,
}

impl InstanceServer {
    /// Starts an instance answering `id` on a fresh loopback address at `port` (0: any).
    pub async fn start(id: &str, port: u16) -> std::io::Result<Self> {
        let listener = loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 100, 0, 1)) + n % ADDRESSES);
            match TcpListener::bind((ip, port)).await {
                Ok(listener) => break listener,
                Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(err) => return Err(err),
            }
        };
        let addr = listener.local_addr()?;
        let body = format!("{{\"instance\":\"{id}\"}}\n");
        let status = Arc::new(AtomicU16::new(200));
        let answers = status.clone();
        let router = Router::new().fallback(get(move || {
            let body = body.clone();
            let status = StatusCode::from_u16(answers.load(Ordering::Relaxed))
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            async move { (status, [("content-type", "application/json")], body) }
        }));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { addr, status, task })
    }

    /// Answers every request from now on with `status` (200 again: healthy again).
    pub fn answer_with(&self, status: StatusCode) {
        self.status.store(status.as_u16(), Ordering::Relaxed);
    }
}

impl Drop for InstanceServer {
    /// Deleting an instance stops its server.
    fn drop(&mut self) {
        self.task.abort();
    }
}
