//! Simulators of the cloud APIs that Bulkhead's provider plugins speak, for the tests and the
//! local platform (`bulkhead dev`).
//!
//! Each simulator implements exactly the subset of its API that the plugin uses and checks
//! what the real service checks (token signatures, request signatures). Its instances are
//! real: each serves HTTP on its own loopback address ([`instances`]), answering with its id,
//! so that routing and health checks can be exercised, and prints (its address, an access log,
//! what a test adds), which the cloud's logging API serves (GCP's Cloud Logging
//! `entries:list`, AWS's CloudWatch Logs `GetLogEvents`). Faults are injected through an admin
//! endpoint ([`faults`]): account suspended (as that cloud reports it), rate limited, added
//! latency, failing with 5xx, and recovery. [`dns`] answers the TXT records that prove a
//! domain's ownership. [`forge`] is the part of GitHub that Bulkhead calls (commit statuses,
//! with GitHub's primary and secondary rate limits) and its webhook sender.

pub mod aws;
pub mod dns;
pub mod faults;
pub mod forge;
pub mod gcp;
pub mod instances;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A simulator serving on a local port.
pub struct RunningSimulator {
    pub addr: SocketAddr,
    /// Connections accepted so far (to see whether clients keep theirs alive).
    accepted: Arc<AtomicUsize>,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningSimulator {
    /// Serves `router` on `listen` (port 0 picks one).
    pub async fn serve(listen: SocketAddr, router: axum::Router) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let listener = listener.tap_io(move |_| {
            counted.fetch_add(1, Ordering::Relaxed);
        });
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|stopped| *stopped).await;
                })
                .await
        });
        Ok(Self {
            addr,
            accepted,
            stop,
            task,
        })
    }

    /// Connections accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn shutdown(self) -> std::io::Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(std::io::Error::other)?
    }
}

/// A plain HTTP client for the simulators' tests (in a workspace build, reqwest's TLS is
/// configured by bulkhead-common, so its crypto provider must be installed first).
#[cfg(test)]
fn test_http() -> reqwest::Client {
    test_http_builder().build().expect("a client builds")
}

#[cfg(test)]
fn test_http_builder() -> reqwest::ClientBuilder {
    bulkhead_common::tls::crypto_provider_install();
    reqwest::Client::builder()
}
