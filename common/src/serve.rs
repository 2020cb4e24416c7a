//! Serving an axum router to clients that may be slow or hostile (the control plane, the host
//! agent, the edge agent's status): every connection is bounded in time and in number.
//!
//! - **Time.** A client has [`ConnectionLimits::header_read_timeout`] to finish its TLS
//!   handshake, and then to send each request's headers; a kept-alive HTTP/1.1 connection
//!   that sends nothing for that long is closed too (hyper's header timer starts as soon as the
//!   connection waits for a request). The request timeout of the router starts after that. An
//!   HTTP/2 connection (over TLS, by ALPN) is pinged, and closed when its peer stops answering.
//! - **Number.** At most [`ConnectionLimits::max_open`] connections are open at once, below the
//!   process's open-file limit so that the database, the plugins and outbound calls keep room,
//!   and at most [`ConnectionLimits::max_per_address`] from one client address (an IPv6 client
//!   counts by its /64, what one host is given). Proxies that forward many clients' requests
//!   (`exempt`) count toward the total only. A connection past either cap is closed at once,
//!   so the accept queue keeps moving for everyone else.
//! - **Out of files.** An accept that fails for want of file descriptors (`EMFILE`, `ENFILE`)
//!   is retried after a pause that doubles up to a second, and logged once per burst, instead
//!   of spinning and logging every time.
//!
//! Plain HTTP is HTTP/1.1 only (a TLS-terminating proxy speaks it upstream); with
//! [`ServerTls`], HTTP/1.1 or HTTP/2 by ALPN, from a certificate re-read when its files change.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use ipnet::IpNet;
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use crate::tls::server::{RELOAD_INTERVAL, ServerTls};

/// How many connections a server keeps open, and how long it waits for a slow client.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Connections open at once, from everyone.
    pub max_open: usize,
    /// Connections open at once from one client address (an IPv6 /64).
    pub max_per_address: usize,
    /// Addresses whose connections count toward [`Self::max_open`] only: proxies that
    /// forward many clients' requests.
    pub exempt: Vec<IpNet>,
    /// Time to finish the TLS handshake and to send each request's headers, and the longest a
    /// kept-alive connection stays open without a request.
    pub header_read_timeout: Duration,
}

/// File descriptors kept out of [`ConnectionLimits::max_open`]: the database pool, plugins'
/// state, outbound calls, logs.
pub const FILES_RESERVED: u64 = 1024;
/// Connections from one address, by default: a busy office behind one NAT, not a flood.
pub const MAX_PER_ADDRESS: usize = 256;
/// The header-read (and keep-alive idle) timeout, by default.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

impl ConnectionLimits {
    /// Limits for this process: its open-file limit raised as far as it may go
    /// ([`open_files_limit_raise`]), less [`FILES_RESERVED`] (half of it, if that is less).
    pub fn for_this_process() -> Self {
        let files = open_files_limit_raise();
        let max_open = files.saturating_sub(FILES_RESERVED).max(files / 2).max(16);
        Self {
            max_open: usize::try_from(max_open).unwrap_or(usize::MAX),
            max_per_address: MAX_PER_ADDRESS,
            exempt: Vec::new(),
            header_read_timeout: HEADER_READ_TIMEOUT,
        }
    }
}

/// Raises this process's soft limit of open files to its hard limit (as Go's runtime does),
/// and returns the soft limit in force.
pub fn open_files_limit_raise() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// [`ConnectionLimits::max_open`] are open.
    Full,
    /// [`ConnectionLimits::max_per_address`] are open from its address.
    AddressFull,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Refusal::Full => "full",
            Refusal::AddressFull => "address_full",
        }
    }
}

/// The counts of open connections, overall and by address.
struct Gate {
    limits: ConnectionLimits,
    open: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// An admitted connection's place, given back when it is dropped.
struct Admitted {
    gate: Arc<Gate>,
    /// The address it counts under, unless exempt.
    address: Option<IpAddr>,
}

impl Gate {
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Refusal> {
        let peer = peer.to_canonical();
        let exempt = self.limits.exempt.iter().any(|net| net.contains(&peer));
        let address = (!exempt).then(|| address_key(peer));
        let mut counts = self.open.lock().expect("the gate's lock is never poisoned");
        if counts.total >= self.limits.max_open {
            return Err(Refusal::Full);
        }
        if let Some(address) = address {
            let held = counts.by_address.entry(address).or_default();
            if *held >= self.limits.max_per_address {
                return Err(Refusal::AddressFull);
            }
            *held += 1;
        }
        counts.total += 1;
        metrics_open(counts.total);
        Ok(Admitted {
            gate: self.clone(),
            address,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self
            .gate
            .open
            .lock()
            .expect("the gate's lock is never poisoned");
        counts.total -= 1;
        if let Some(address) = self.address
            && let Some(held) = counts.by_address.get_mut(&address)
        {
            *held -= 1;
            if *held == 0 {
                counts.by_address.remove(&address);
            }
        }
        metrics_open(counts.total);
    }
}

fn metrics_open(total: usize) {
    metrics::gauge!("http_connections_open").set(total as f64);
}

/// What a client address counts under: itself, or for IPv6 its /64.
fn address_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
    }
}

/// The pause before the next accept after a failure for want of files: 10 ms doubling to 1 s,
/// logged once per burst.
#[derive(Default)]
struct AcceptBackoff {
    pause: Option<Duration>,
    failures: u64,
    since: Option<Instant>,
}

impl AcceptBackoff {
    async fn after(&mut self, err: &std::io::Error) {
        use std::io::ErrorKind;
        // The peer gave up between its connect and our accept: nothing to wait for.
        if matches!(
            err.kind(),
            ErrorKind::ConnectionAborted
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionRefused
        ) {
            return;
        }
        self.failures += 1;
        if self.since.is_none() {
            self.since = Some(Instant::now());
            tracing::error!(error = %err, "cannot accept connections (out of file descriptors?): pausing accepts until they succeed");
        }
        metrics::counter!("http_accept_failures_total").increment(1);
        let pause = self.pause.map_or(Duration::from_millis(10), |pause| {
            (pause * 2).min(Duration::from_secs(1))
        });
        self.pause = Some(pause);
        tokio::time::sleep(pause).await;
    }

    fn succeeded(&mut self) {
        if let Some(since) = self.since.take() {
            tracing::warn!(failures = self.failures, after = ?since.elapsed(), "accepting connections again");
        }
        self.pause = None;
        self.failures = 0;
    }
}

/// A TLS acceptor whose certificate is re-read when its files change.
#[derive(Clone)]
struct Acceptor {
    config: Arc<RwLock<Arc<rustls::ServerConfig>>>,
}

impl Acceptor {
    fn start(tls: ServerTls) -> anyhow::Result<(Self, tokio::task::JoinHandle<()>)> {
        let acceptor = Self {
            config: Arc::new(RwLock::new(tls.config_load()?)),
        };
        let config = acceptor.config.clone();
        let reload = tokio::spawn(async move {
            let mut stamp = tls.stamp();
            loop {
                tokio::time::sleep(RELOAD_INTERVAL).await;
                let now = tls.stamp();
                if now.is_none() || now == stamp {
                    continue;
                }
                match tls.config_load() {
                    Ok(loaded) => {
                        *config.write().expect("never poisoned") = loaded;
                        stamp = now;
                        tracing::info!(certificate = %tls.certificate.display(), "loaded the TLS certificate again: its files changed");
                    }
                    Err(err) => {
                        tracing::warn!(error = %format!("{err:#}"), "the TLS certificate's files changed but do not load; serving the one loaded before")
                    }
                }
            }
        });
        Ok((acceptor, reload))
    }

    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.read().expect("never poisoned").clone())
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes, then lets open
/// requests finish. The router sees each client's address as `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<ServerTls>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (acceptor, reload) = match tls {
        Some(tls) => {
            let (acceptor, reload) = Acceptor::start(tls)?;
            (Some(acceptor), Some(reload))
        }
        None => (None, None),
    };
    let timeout = limits.header_read_timeout;
    let gate = Arc::new(Gate {
        limits,
        open: Mutex::default(),
    });
    let graceful = GracefulShutdown::new();
    let mut backoff = AcceptBackoff::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff.succeeded();
                    accepted
                }
                Err(err) => {
                    backoff.after(&err).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let admitted = match gate.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                metrics::counter!("http_connections_refused_total", "reason" => refusal.as_str())
                    .increment(1);
                tracing::debug!(%peer, reason = refusal.as_str(), "connection refused");
                // Closed at once: the client learns now, and the file is free again.
                drop(stream);
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone().map_request(
            move |mut request: hyper::Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            },
        ));
        let watcher = graceful.watcher();
        let acceptor = acceptor.as_ref().map(Acceptor::acceptor);
        tokio::spawn(async move {
            let _admitted = admitted;
            let _ = stream.set_nodelay(true);
            match acceptor {
                None => http1_serve(watcher, TokioIo::new(stream), service, timeout).await,
                Some(acceptor) => tls_serve(watcher, acceptor, stream, service, timeout).await,
            }
        });
    }
    drop(listener);
    if let Some(reload) = reload {
        reload.abort();
    }
    graceful.shutdown().await;
    Ok(())
}

async fn tls_serve<S>(
    watcher: hyper_util::server::graceful::Watcher,
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    service: S,
    timeout: Duration,
) where
    S: HyperService,
{
    let stream = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "TLS handshake failed");
            return;
        }
        Err(_) => {
            metrics::counter!("http_connections_timed_out_total", "phase" => "tls_handshake")
                .increment(1);
            return;
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(stream);
    if h2 {
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(timeout))
            .keep_alive_timeout(timeout)
            .max_concurrent_streams(200);
        if let Err(err) = watcher.watch(builder.serve_connection(io, service)).await {
            tracing::debug!(error = %err, "HTTP/2 connection ended with an error");
        }
    } else {
        http1_serve(watcher, io, service, timeout).await;
    }
}

async fn http1_serve<I, S>(
    watcher: hyper_util::server::graceful::Watcher,
    io: I,
    service: S,
    timeout: Duration,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: HyperService,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .keep_alive(true);
    // No upgrades: nothing served speaks WebSocket (event streams are SSE).
    if let Err(err) = watcher.watch(builder.serve_connection(io, service)).await {
        tracing::debug!(error = %err, "HTTP/1 connection ended with an error");
    }
}

/// What [`serve`] hands hyper for each connection.
trait HyperService:
    hyper::service::Service<
        hyper::Request<Incoming>,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> HyperService for S where
    S: hyper::service::Service<
            hyper::Request<Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max_open: usize, max_per_address: usize, exempt: &[&str]) -> Arc<Gate> {
        Arc::new(Gate {
            limits: ConnectionLimits {
                max_open,
                max_per_address,
                exempt: exempt.iter().map(|net| net.parse().unwrap()).collect(),
                header_read_timeout: HEADER_READ_TIMEOUT,
            },
            open: Mutex::default(),
        })
    }

    #[test]
    fn one_address_cannot_take_every_place() {
        let gate = gate(5, 2, &["10.0.0.0/8"]);
        let one: IpAddr = "192.0.2.1".parse().unwrap();
        let held: Vec<_> = (0..2).map(|_| gate.admit(one).unwrap()).collect();
        assert_eq!(gate.admit(one).err(), Some(Refusal::AddressFull));
        // The same address written as IPv4-mapped IPv6 is the same client.
        assert_eq!(
            gate.admit("::ffff:192.0.2.1".parse().unwrap()).err(),
            Some(Refusal::AddressFull)
        );
        let other = gate.admit("192.0.2.2".parse().unwrap()).unwrap();
        // A proxy counts toward the total only.
        let proxied: Vec<_> = (0..2)
            .map(|_| gate.admit("10.1.2.3".parse().unwrap()).unwrap())
            .collect();
        assert_eq!(
            gate.admit("192.0.2.3".parse().unwrap()).err(),
            Some(Refusal::Full)
        );
        drop(held);
        assert!(gate.admit(one).is_ok(), "places are given back");
        drop((other, proxied));
        let counts = gate.open.lock().unwrap();
        assert_eq!(counts.total, 0);
        assert!(
            counts.by_address.is_empty(),
            "no address is kept once its last connection closes"
        );
    }

    #[test]
    fn an_ipv6_client_counts_by_its_64() {
        let gate = gate(10, 1, &[]);
        let _first = gate.admit("2001:db8:1:2::1".parse().unwrap()).unwrap();
        assert_eq!(
            gate.admit("2001:db8:1:2:ffff::9".parse().unwrap()).err(),
            Some(Refusal::AddressFull)
        );
        assert!(gate.admit("2001:db8:1:3::1".parse().unwrap()).is_ok());
    }
}
