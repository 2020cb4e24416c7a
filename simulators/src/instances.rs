//! Simulated instances are real: each one serves HTTP on its own loopback address (Linux
//! routes all of 127.0.0.0/8 to the loopback interface), on the port its workload asked for,
//! answering every request with its id. So an instance's address looks like a cloud's
//! (`ip:port`, the port the workload listens on), and routing and health checks reach it.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Addresses handed out so far (process-wide, so that two simulators never share one).
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A running simulated instance.
pub struct InstanceServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl InstanceServer {
    /// Starts an instance answering `id` on a fresh loopback address at `port` (0: any).
    pub async fn start(id: &str, port: u16) -> std::io::Result<Self> {
        let listener = loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            // 127.100.0.1 .. 127.255.255.254: clear of 127.0.0.1 and its neighbours.
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 100, 0, 1)) + n % (155 << 16));
            match TcpListener::bind((ip, port)).await {
                Ok(listener) => break listener,
                Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(err) => return Err(err),
            }
        };
        let addr = listener.local_addr()?;
        let body = format!("{{\"instance\":\"{id}\"}}\n");
        let router = Router::new().fallback(get(move || {
            let body = body.clone();
            async move { ([("content-type", "application/json")], body) }
        }));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { addr, task })
    }
}

impl Drop for InstanceServer {
    /// Deleting an instance stops its server.
    fn drop(&mut self) {
        self.task.abort();
    }
}
