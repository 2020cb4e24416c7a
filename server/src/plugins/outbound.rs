//! Outbound HTTP of plugins: the per-provider allowlist of `host:port` patterns and the
//! `wasi:http` hooks that enforce it and bound what a call's requests may hold.
//!
//! A request leaves the host only when (1) its authority carries no userinfo, (2) its
//! `host:port` is on the allowlist, and (3) the address the name resolves to is public, or is
//! itself named by a pattern an operator listed (an IP pattern such as `127.0.0.1:9000`): a
//! public name that resolves to loopback, a link-local address (the cloud metadata service at
//! 169.254.169.254) or a private range is refused, and so is such an address in a pattern
//! derived from the provider's configuration (its endpoints, [`Allowlist::with_endpoints`]):
//! a configured URL is a name to reach, never a way into the host's network. The connection
//! is then made to the very address that was checked, so a second DNS answer cannot redirect
//! it. Plain HTTP goes to loopback addresses only; anything else must be HTTPS, verified
//! against the web's roots or the provider's pinned certificates (`super::tls_pins`).
//! Anything refused never leaves the host: the plugin gets `error-code.HTTP-request-denied`,
//! the operator a warning naming the provider, the destination and why, and
//! `plugin_http_denied_total{provider}` counts it.
//!
//! What bounds the outbound requests of one call:
//! - **The call itself.** Every request (its name lookup, connection, TLS handshake, and the
//!   connection that streams its response) runs under the call: when the call returns, traps
//!   or hits its deadline, its store is dropped, which aborts them all (and cancels a token
//!   every one of them also watches), and the call gives its slot back only once they have
//!   been dropped, sockets closed. A plugin cannot leave a request, a socket, a buffer or a
//!   task behind it. The host spawns no task of its own for a request: wasmtime runs it, and
//!   then its connection, as tasks owned by the call's resources.
//! - **Name lookups** are asynchronous ([`super::names`]): dropped with their request.
//! - **Timeouts**, the plugin's `wasi:http` request options or else the defaults
//!   ([`CONNECT_TIMEOUT`], [`FIRST_BYTE_TIMEOUT`], [`BETWEEN_BYTES_TIMEOUT`]), none longer
//!   than the call's deadline: connecting (name lookup, TCP and the TLS handshake together),
//!   the first byte of the response (its head), and each gap between bytes of its body.
//! - **At most [`REQUESTS_IN_FLIGHT_PER_CALL`] requests in flight** (from the request until
//!   its connection closes): past them a request is refused with
//!   `error-code.connection-limit-reached`, a warning and
//!   `plugin_http_in_flight_refused_total{provider}`.
//! - **The response body cap** of the plugin's limits.
//!
//! A connection whose response was read to its end, within its call, is kept for the
//! provider's next request to the same destination ([`super::connection_pool`]); an idle one
//! is driven by no one, so it holds no task. A request on a kept connection is checked against
//! the allowlist by name as any other; the address was checked when the connection was made,
//! under the same settings (the pool goes with them).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::connection_pool::{self, Connection, ConnectionPool, Destination as PoolKey, Sender};
use super::names::NameResolver;

/// Requests one plugin call may have in flight at once; more are refused.
pub const REQUESTS_IN_FLIGHT_PER_CALL: usize = 16;
/// How long a request may take to connect (name lookup, TCP, TLS handshake) when its plugin
/// does not say.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request may wait for the head of its response when its plugin does not say.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a response body may send nothing when its plugin does not say.
pub const BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the end of a call waits for its aborted requests to be dropped. They are dropped
/// at once; this bounds a bug of the host, not anything a plugin does.
const REQUESTS_DROP_WAIT: Duration = Duration::from_secs(1);

/// One allowed destination: `host:port`, where the host may start with `*.` (any subdomain,
/// not the domain itself) and the port may be `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: String,
    port: Option<u16>,
}

impl FromStr for HostPattern {
    type Err = String;

    fn from_str(pattern: &str) -> Result<Self, String> {
        let (host, port) = pattern
            .rsplit_once(':')
            .ok_or_else(|| format!("`{pattern}` is not host:port (the port may be `*`)"))?;
        let port = match port {
            "*" => None,
            port => Some(
                port.parse::<u16>()
                    .ok()
                    .filter(|port| *port != 0)
                    .ok_or_else(|| format!("`{pattern}`: `{port}` is not a port or `*`"))?,
            ),
        };
        let host = host.to_ascii_lowercase();
        let bare = host.strip_prefix("*.").unwrap_or(&host);
        let valid_label = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        // A bracketed host is an IPv6 address, exactly (and takes no `*.`).
        let ipv6 = host
            .strip_prefix('[')
            .and_then(|inner| inner.strip_suffix(']'))
            .is_some_and(|inner| inner.parse::<std::net::Ipv6Addr>().is_ok());
        if !(ipv6 || (bare.len() <= 253 && bare.split('.').all(valid_label))) {
            return Err(format!(
                "`{pattern}`: `{host}` is not a host name, an IP address or `*.domain`"
            ));
        }
        Ok(Self { host, port })
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => write!(f, "{}:*", self.host),
        }
    }
}

impl HostPattern {
    fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|allowed| allowed != port) {
            return false;
        }
        match self.host.strip_prefix("*.") {
            Some(domain) => host
                .strip_suffix(domain)
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            None => self.host == host,
        }
    }
}

/// The destinations a provider's plugin may reach. Empty: none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    /// The patterns an operator listed: only these may name a restricted address.
    listed: Vec<HostPattern>,
    /// The endpoints of the provider's configuration: names it may reach, never a restricted
    /// address.
    configured: Vec<HostPattern>,
}

/// The IPv4 address an IPv6 address carries, where it reaches that IPv4 host: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated), NAT64 (`64:ff9b::/96`) and 6to4
/// (`2002:AABB:CCDD::/48`).
fn ipv4_embedded(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let segments = v6.segments();
    let octets = v6.octets();
    let tail = std::net::Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]);
    if let Some(mapped) = v6.to_ipv4_mapped() {
        Some(mapped)
    } else if (segments[..6] == [0; 6] && !(v6.is_loopback() || v6.is_unspecified()))
        || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        Some(tail)
    } else if segments[0] == 0x2002 {
        Some(std::net::Ipv4Addr::new(
            octets[2], octets[3], octets[4], octets[5],
        ))
    } else {
        None
    }
}

impl Allowlist {
    /// The patterns an operator listed, each parsed, or which one is wrong.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, String> {
        let listed = patterns
            .iter()
            .map(|pattern| pattern.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(Self {
            listed,
            configured: Vec::new(),
        })
    }

    /// This allowlist and the endpoints of a provider's configuration ([`endpoint_patterns`]):
    /// their names may be reached, but an address they name (`http://127.0.0.1:9000`,
    /// `http://169.254.169.254/`) opens nothing restricted unless the operator listed it too.
    pub fn with_endpoints(mut self, config: &BTreeMap<String, String>) -> Self {
        for derived in endpoint_patterns(config) {
            let Ok(pattern) = derived.parse::<HostPattern>() else {
                continue;
            };
            if !self.listed.contains(&pattern) && !self.configured.contains(&pattern) {
                self.configured.push(pattern);
            }
        }
        self
    }

    /// Whether `host` (lowercase, as in a URI authority) and `port` are allowed.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        self.all().any(|pattern| pattern.matches(&host, port))
    }

    /// Every pattern: those listed, then those of the configuration.
    pub fn patterns(&self) -> impl Iterator<Item = String> + '_ {
        self.all().map(HostPattern::to_string)
    }

    fn all(&self) -> impl Iterator<Item = &HostPattern> {
        self.listed.iter().chain(&self.configured)
    }
}

/// `host:port` of every `http(s)://` URL in a provider's configuration (a value, or one of
/// comma-separated values): a provider may always reach the endpoints it is configured with.
/// They are a provider's `effective_allowlist` beside its listed patterns;
/// [`Allowlist::with_endpoints`] adds them as names only.
pub fn endpoint_patterns(config: &BTreeMap<String, String>) -> Vec<String> {
    let mut derived: Vec<String> = config
        .values()
        .flat_map(|value| value.split(','))
        .filter_map(|item| item.trim().parse::<http::Uri>().ok())
        .filter_map(|uri| {
            let port = match uri.scheme_str()? {
                "http" => uri.port_u16().unwrap_or(80),
                "https" => uri.port_u16().unwrap_or(443),
                _ => return None,
            };
            Some(format!("{}:{port}", uri.host()?))
        })
        .filter(|pattern| pattern.parse::<HostPattern>().is_ok())
        .collect();
    derived.sort();
    derived.dedup();
    derived
}

/// Why an address is not reachable by name alone, or `None` for a public address.
pub fn address_restricted(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => ipv4_embedded(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_link_local() {
                Some("link-local (cloud metadata)")
            } else if v4.is_private() || (a == 100 && (64..128).contains(&b)) {
                Some("private")
            } else if v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                || a >= 240
                || (a == 198 && (18..20).contains(&b))
                || v4.octets()[..3] == [192, 0, 0]
            {
                // Reserved, benchmarking and IETF protocol-assignment ranges.
                Some("unroutable")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0 {
                // Unique-local, and the deprecated site-local.
                Some("private")
            } else if v6.is_unspecified() || v6.is_multicast() {
                Some("unroutable")
            } else {
                None
            }
        }
    }
}

impl Allowlist {
    /// Whether a pattern the operator listed names `ip` for `port` (an IP pattern, such as
    /// `127.0.0.1:9000`): only then may a restricted address be reached. A name never does,
    /// `localhost` included: what a name resolves to is not the operator's decision; nor does
    /// an endpoint of the configuration: a configuration value is no allowlist entry.
    fn names_address(&self, ip: IpAddr, port: u16) -> bool {
        self.listed.iter().any(|pattern| {
            if pattern.port.is_some_and(|allowed| allowed != port) {
                return false;
            }
            let host = pattern.host.trim_start_matches('[').trim_end_matches(']');
            host.parse::<IpAddr>().is_ok_and(|named| named == ip)
        })
    }
}

/// What every request of a provider's call is checked against.
struct OutboundRules {
    provider: Arc<str>,
    allowlist: Arc<Allowlist>,
    /// Largest response body the plugin may read.
    response_bytes: u64,
    /// How its TLS servers are verified (`super::tls_pins`).
    tls: Arc<rustls::ClientConfig>,
    /// Looks its names up.
    names: NameResolver,
    /// The provider's idle connections (`super::connection_pool`).
    pool: Arc<ConnectionPool>,
}

/// The `wasi:http` hooks of one plugin call, owned by the call's store: dropping it (the call
/// is over) cancels every request of the call.
pub(super) struct OutboundPolicy {
    rules: Arc<OutboundRules>,
    /// The call's deadline: no request's timeout is longer.
    deadline: Duration,
    /// One permit per request in flight, held until its connection closes.
    in_flight: Arc<Semaphore>,
    /// Cancelled when the call is over; every request future and connection of the call
    /// watches it.
    call_over: CancellationToken,
}

impl Drop for OutboundPolicy {
    fn drop(&mut self) {
        self.call_over.cancel();
    }
}

/// The requests of a call, as the call's end waits for them.
pub(super) struct CallRequests(Arc<Semaphore>);

impl CallRequests {
    /// Returns once every request of the call has been dropped (its socket closed). To be
    /// awaited after the call's store is dropped, which aborts them.
    pub(super) async fn dropped(self, provider: &str) {
        let all = u32::try_from(REQUESTS_IN_FLIGHT_PER_CALL).expect("a small number");
        if tokio::time::timeout(REQUESTS_DROP_WAIT, self.0.acquire_many(all))
            .await
            .is_err()
        {
            tracing::error!(
                provider,
                "requests of a plugin call were still alive {REQUESTS_DROP_WAIT:?} after it ended"
            );
        }
    }
}

impl OutboundPolicy {
    /// The hooks of one call of `provider` that has `deadline` to run.
    pub(super) fn new(
        provider: Arc<str>,
        allowlist: Arc<Allowlist>,
        response_bytes: u64,
        tls: Arc<rustls::ClientConfig>,
        deadline: Duration,
        names: NameResolver,
        pool: Arc<ConnectionPool>,
    ) -> Self {
        Self {
            rules: Arc::new(OutboundRules {
                provider,
                allowlist,
                response_bytes,
                tls,
                names,
                pool,
            }),
            deadline,
            in_flight: Arc::new(Semaphore::new(REQUESTS_IN_FLIGHT_PER_CALL)),
            call_over: CancellationToken::new(),
        }
    }

    /// What the end of the call waits for.
    pub(super) fn requests(&self) -> CallRequests {
        CallRequests(self.in_flight.clone())
    }

    /// A place among the call's requests in flight, or the refusal past the cap.
    fn admit(&self, destination: &str) -> Result<OwnedSemaphorePermit, HttpError> {
        self.in_flight.clone().try_acquire_owned().map_err(|_| {
            tracing::warn!(
                provider = %self.rules.provider,
                destination,
                limit = REQUESTS_IN_FLIGHT_PER_CALL,
                "plugin HTTP request refused: its call already has the most requests in flight it may have"
            );
            metrics::counter!(
                "plugin_http_in_flight_refused_total",
                "provider" => self.rules.provider.to_string()
            )
            .increment(1);
            HttpError::ConnectionLimitReached
        })
    }
}

/// A request's authority, checked against the allowlist (no DNS yet).
#[derive(Debug, PartialEq, Eq)]
struct Named {
    /// Lowercase, IPv6 in brackets.
    host: String,
    port: u16,
    tls: bool,
}

/// Where a checked request goes: the address to connect to, and the name to verify TLS
/// against.
struct Destination {
    address: SocketAddr,
    server_name: String,
    /// `None` for plain HTTP.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl OutboundRules {
    /// Checks the authority against the allowlist (no DNS yet).
    fn check_name(&self, uri: &http::Uri) -> Result<Named, String> {
        let authority = uri.authority().ok_or("the URL has no host")?;
        if authority.as_str().contains('@') {
            return Err("the URL carries credentials (userinfo) in its authority".into());
        }
        let tls = uri.scheme() != Some(&http::uri::Scheme::HTTP);
        let host = authority.host().to_ascii_lowercase();
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        if !self.allowlist.allows(&host, port) {
            return Err("destination not on the provider's allowlist".into());
        }
        Ok(Named { host, port, tls })
    }

    /// Resolves an allowed name and picks the first address it may reach.
    async fn resolve(
        names: &NameResolver,
        allowlist: &Allowlist,
        host: &str,
        port: u16,
    ) -> Result<SocketAddr, String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let candidates: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => names.lookup(bare, port).await?,
        };
        let mut refused = None;
        for candidate in candidates {
            match address_restricted(candidate.ip()) {
                None => return Ok(candidate),
                Some(_) if allowlist.names_address(candidate.ip(), port) => return Ok(candidate),
                Some(range) => {
                    refused = Some(format!(
                        "{host} resolves to {}, a {range} address the allowlist does not name",
                        candidate.ip()
                    ))
                }
            }
        }
        Err(refused.unwrap_or_else(|| format!("{host} resolves to no address")))
    }

    fn refuse(&self, destination: &str, why: &str) -> HttpError {
        tracing::warn!(
            provider = %self.provider,
            destination,
            why,
            "plugin HTTP request refused"
        );
        metrics::counter!("plugin_http_denied_total", "provider" => self.provider.to_string())
            .increment(1);
        HttpError::HttpRequestDenied
    }

    /// Sends a request whose name was checked: resolves and checks its address, connects
    /// (TLS included) within the connect timeout, and waits for the response's head within
    /// the first-byte timeout. Returns the response, its body capped and timed, and the
    /// connection still to drive while the body comes (unless it already ended).
    async fn send(
        &self,
        shown: &str,
        named: Named,
        request: http::Request<WasiBody>,
        timeouts: Timeouts,
    ) -> Result<(http::Response<WasiBody>, Option<Returned>), HttpError> {
        let key = PoolKey {
            host: named.host.clone(),
            port: named.port,
            tls: named.tls,
        };
        let mut request = request;
        if let Some((sender, connection)) = self.pool.take(&key) {
            match exchange(sender, connection, request, timeouts.first_byte).await {
                Ok((response, sender, connection)) => {
                    metrics::counter!("plugin_http_connections_reused_total", "provider" => self.provider.to_string())
                        .increment(1);
                    return Ok(self.response_capped(response, timeouts, key, sender, connection));
                }
                // Closed by its server just now, before the request went out: a new one.
                Err(Unsent::Request(returned)) => request = returned,
                Err(Unsent::Failed(err)) => return Err(err),
            }
        }
        let connecting = async {
            let address = Self::resolve(&self.names, &self.allowlist, &named.host, named.port)
                .await
                .map_err(|why| self.refuse(shown, &why))?;
            cleartext_check(address, named.tls).map_err(|why| self.refuse(shown, why))?;
            connect(Destination {
                address,
                server_name: named
                    .host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                tls: named.tls.then(|| self.tls.clone()),
            })
            .await
        };
        let (sender, connection) = tokio::time::timeout(timeouts.connect, connecting)
            .await
            .map_err(|_elapsed| HttpError::ConnectionTimeout)??;
        metrics::counter!("plugin_http_connections_opened_total", "provider" => self.provider.to_string())
            .increment(1);
        let (response, sender, connection) =
            match exchange(sender, connection, request, timeouts.first_byte).await {
                Ok(exchanged) => exchanged,
                Err(Unsent::Failed(err)) => return Err(err),
                Err(Unsent::Request(_)) => {
                    return Err(HttpError::ConnectionTerminated);
                }
            };
        Ok(self.response_capped(response, timeouts, key, sender, connection))
    }

    /// The response with its body capped and timed, and what drives its connection back to
    /// the pool.
    fn response_capped(
        &self,
        response: http::Response<hyper::body::Incoming>,
        timeouts: Timeouts,
        key: PoolKey,
        sender: Sender,
        connection: Option<Connection>,
    ) -> (http::Response<WasiBody>, Option<Returned>) {
        let cap = self.response_bytes;
        let lent = connection.map(|connection| {
            connection_pool::Lent::new(self.pool.clone(), key, sender, connection)
        });
        let on_end = lent.clone();
        let response = response.map(|body| {
            let timed = BetweenBytes::new(body, timeouts.between_bytes, on_end);
            Limited::new(timed, usize::try_from(cap).unwrap_or(usize::MAX))
                .map_err(move |err| match err.downcast::<HttpError>() {
                    Ok(err) => *err,
                    Err(_) => HttpError::HttpResponseBodySize(Some(cap)),
                })
                .boxed_unsync()
        });
        (response, lent)
    }
}

/// A connection still to drive while its response's body comes, and to give back after.
type Returned = Arc<connection_pool::Lent>;

/// Why an exchange got no response: the request never left (given back, to send on another
/// connection), or it failed.
enum Unsent {
    Request(http::Request<WasiBody>),
    Failed(HttpError),
}

impl From<HttpError> for Unsent {
    fn from(err: HttpError) -> Self {
        Unsent::Failed(err)
    }
}

/// An authority as it may be logged: `host[:port]`, never the credentials before an `@`.
fn authority_shown(authority: &http::uri::Authority) -> String {
    match authority.port() {
        Some(port) => format!("{}:{port}", authority.host()),
        None => authority.host().to_owned(),
    }
}

type IoFuture = Box<dyn Future<Output = Result<(), HttpError>> + Send>;
type SendFuture =
    Box<dyn Future<Output = Result<(http::Response<WasiBody>, IoFuture), HttpError>> + Send>;

impl WasiHttpHooks for OutboundPolicy {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        drop(fut);
        let shown = request
            .uri()
            .authority()
            .map(authority_shown)
            .unwrap_or_default();
        let admitted = self
            .rules
            .check_name(request.uri())
            .map_err(|why| self.rules.refuse(&shown, &why))
            .and_then(|named| Ok((named, self.admit(&shown)?)));
        let rules = self.rules.clone();
        let timeouts = Timeouts::of(options, self.deadline);
        let call_over = self.call_over.clone();
        Box::new(async move {
            let (named, in_flight) = admitted?;
            let (response, connection) = call_over
                .run_until_cancelled(rules.send(&shown, named, request, timeouts))
                .await
                .ok_or_else(call_ended)??;
            // The request stays in flight (its permit held) until its connection closes, and
            // not past the call.
            let io: IoFuture = Box::new(async move {
                let _in_flight = in_flight;
                match connection {
                    Some(lent) => call_over
                        .run_until_cancelled(lent.drive())
                        .await
                        .unwrap_or(Ok(())),
                    None => Ok(()),
                }
            });
            Ok((response, io))
        })
    }
}

/// What a request's future ends with when its call is over (the plugin never sees it).
fn call_ended() -> HttpError {
    HttpError::InternalError(Some("the plugin call is over".into()))
}

/// The timeouts of one request: the plugin's request options, or the defaults, none longer
/// than its call's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timeouts {
    connect: Duration,
    first_byte: Duration,
    between_bytes: Duration,
}

impl Timeouts {
    fn of(options: Option<RequestOptions>, deadline: Duration) -> Self {
        let options = options.unwrap_or_default();
        let bounded =
            |asked: Option<Duration>, default: Duration| asked.unwrap_or(default).min(deadline);
        Self {
            connect: bounded(options.connect_timeout, CONNECT_TIMEOUT),
            first_byte: bounded(options.first_byte_timeout, FIRST_BYTE_TIMEOUT),
            between_bytes: bounded(options.between_bytes_timeout, BETWEEN_BYTES_TIMEOUT),
        }
    }
}

/// Plain HTTP goes to loopback only: a plugin's requests carry its credentials (a cloud
/// token, an agent's token), which must not cross a network in clear.
fn cleartext_check(address: SocketAddr, tls: bool) -> Result<(), &'static str> {
    if tls || address.ip().to_canonical().is_loopback() {
        Ok(())
    } else {
        Err("plain HTTP to an address that is not loopback (use https)")
    }
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Opens an HTTP/1.1 connection to the checked address (TLS verified against the host name),
/// never resolving the name again.
async fn connect(destination: Destination) -> Result<(Sender, Connection), HttpError> {
    let tcp = tokio::net::TcpStream::connect(destination.address)
        .await
        .map_err(HttpError::Connect)?;
    let stream: Box<dyn Stream> = if let Some(config) = destination.tls {
        let name = rustls::pki_types::ServerName::try_from(destination.server_name)?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(HttpError::Tls)?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    Ok((
        sender,
        Box::pin(async move { connection.await.map_err(HttpError::from) }),
    ))
}

/// Sends `request` over its connection, driving the connection meanwhile, and waits up to
/// `first_byte` for the response's head. The sender and the connection are handed back, the
/// connection to be driven while the body comes, unless it already ended. A request that
/// could not be written (the connection was closed) is handed back unsent.
async fn exchange(
    mut sender: Sender,
    mut connection: Connection,
    mut request: http::Request<WasiBody>,
    first_byte: Duration,
) -> Result<
    (
        http::Response<hyper::body::Incoming>,
        Sender,
        Option<Connection>,
    ),
    Unsent,
> {
    // The request line carries the path only; the `Host` header names the destination.
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(
            request
                .uri()
                .path_and_query()
                .map_or("/", |path| path.as_str()),
        )
        .build()
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let answer = tokio::time::timeout(first_byte, sender.try_send_request(request));
    tokio::pin!(answer);
    let (answer, connection) = tokio::select! {
        biased;
        answer = &mut answer => (answer, Some(connection)),
        ended = &mut connection => {
            // Closed before its answer was taken: the answer, or why there is none, is there.
            match ended {
                Ok(()) => (answer.await, None),
                Err(err) => match answer.await {
                    Ok(Err(mut unsent)) => match unsent.take_message() {
                        Some(request) => return Err(Unsent::Request(request)),
                        None => return Err(Unsent::Failed(err)),
                    },
                    _ => return Err(Unsent::Failed(err)),
                },
            }
        }
    };
    match answer {
        Err(_elapsed) => Err(Unsent::Failed(HttpError::HttpResponseTimeout)),
        Ok(Ok(response)) => Ok((response, sender, connection)),
        Ok(Err(mut unsent)) => match unsent.take_message() {
            Some(request) => Err(Unsent::Request(request)),
            None => Err(Unsent::Failed(HttpError::from(unsent.into_error()))),
        },
    }
}

/// A response body that fails with `connection-read-timeout` when its server sends nothing
/// for `gap` (the between-bytes timeout). Only the server's silence counts: a plugin that
/// reads slowly finds its data waiting.
/// Its end gives its connection back to the pool.
struct BetweenBytes {
    body: hyper::body::Incoming,
    gap: Duration,
    silence: Pin<Box<tokio::time::Sleep>>,
    connection: Option<Returned>,
}

impl BetweenBytes {
    fn new(body: hyper::body::Incoming, gap: Duration, connection: Option<Returned>) -> Self {
        Self {
            body,
            gap,
            silence: Box::pin(tokio::time::sleep(gap)),
            connection,
        }
    }
}

impl http_body::Body for BetweenBytes {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = tokio::time::Instant::now() + this.gap;
                this.silence.as_mut().reset(next);
                if (frame.is_none() || this.body.is_end_stream())
                    && let Some(connection) = this.connection.take()
                {
                    connection.body_ended();
                }
                Poll::Ready(frame.map(|frame| frame.map_err(HttpError::from)))
            }
            Poll::Pending => match this.silence.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exact_hosts_subdomains_and_any_port() {
        let list =
            Allowlist::parse(&["api.example.com:443", "*.googleapis.com:443", "127.0.0.1:*"])
                .unwrap();
        assert!(list.allows("api.example.com", 443));
        assert!(list.allows("API.Example.com", 443));
        assert!(!list.allows("api.example.com", 80));
        assert!(!list.allows("evil-api.example.com", 443));
        assert!(list.allows("compute.googleapis.com", 443));
        assert!(!list.allows("googleapis.com", 443));
        assert!(!list.allows("compute.googleapis.com.evil.net", 443));
        assert!(!list.allows("xgoogleapis.com", 443));
        assert!(list.allows("127.0.0.1", 9000));
        assert!(!list.allows("127.0.0.2", 9000));
        assert!(!Allowlist::default().allows("127.0.0.1", 80));
    }

    #[test]
    fn loopback_link_local_and_private_addresses_are_restricted() {
        for (address, range) in [
            ("127.0.0.1", Some("loopback")),
            ("127.9.9.9", Some("loopback")),
            ("::1", Some("loopback")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("169.254.169.254", Some("link-local (cloud metadata)")),
            ("fe80::1", Some("link-local")),
            ("10.0.0.1", Some("private")),
            ("172.16.5.4", Some("private")),
            ("192.168.1.1", Some("private")),
            ("100.64.0.1", Some("private")),
            ("fd00::1", Some("private")),
            ("0.0.0.0", Some("unroutable")),
            ("::", Some("unroutable")),
            // IPv4 hosts reached through IPv6 forms, and reserved IPv4 ranges.
            ("64:ff9b::a9fe:a9fe", Some("link-local (cloud metadata)")),
            ("2002:a9fe:a9fe::1", Some("link-local (cloud metadata)")),
            ("::10.0.0.1", Some("private")),
            ("fec0::1", Some("private")),
            ("240.0.0.1", Some("unroutable")),
            ("198.18.0.1", Some("unroutable")),
            ("192.0.0.8", Some("unroutable")),
            ("64:ff9b::808:808", None),
            ("8.8.8.8", None),
            ("172.32.0.1", None),
            ("2001:4860:4860::8888", None),
        ] {
            let ip: IpAddr = address.parse().unwrap();
            assert_eq!(address_restricted(ip), range, "{address}");
        }
    }

    #[test]
    fn only_an_ip_pattern_names_a_restricted_address() {
        let list = Allowlist::parse(&[
            "127.0.0.1:9000",
            "[::1]:*",
            "localhost:9000",
            "*.internal:80",
        ])
        .unwrap();
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert!(list.names_address(ip("127.0.0.1"), 9000));
        assert!(!list.names_address(ip("127.0.0.1"), 9001));
        assert!(!list.names_address(ip("127.0.0.2"), 9000));
        assert!(list.names_address(ip("::1"), 443));
        assert!(!list.names_address(ip("169.254.169.254"), 80));
    }

    #[tokio::test]
    async fn names_are_resolved_and_their_addresses_checked() {
        let named = Allowlist::parse(&["localhost:9000"]).unwrap();
        let refused =
            OutboundRules::resolve(&NameResolver::system(), &named, "localhost", 9000).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|why| why.contains("loopback address the allowlist does not name")),
            "{refused:?}"
        );
        let both = Allowlist::parse(&["localhost:9000", "127.0.0.1:9000"]).unwrap();
        let address =
            OutboundRules::resolve(&NameResolver::system(), &both, "localhost", 9000).await;
        assert_eq!(address, Ok("127.0.0.1:9000".parse().unwrap()));
        let literal = OutboundRules::resolve(
            &NameResolver::system(),
            &Allowlist::default(),
            "169.254.169.254",
            80,
        )
        .await;
        assert!(literal.is_err_and(|why| why.contains("link-local")));
    }

    #[test]
    fn a_refused_authority_is_logged_without_its_credentials() {
        let shown =
            |text: &str| authority_shown(text.parse::<http::Uri>().unwrap().authority().unwrap());
        assert_eq!(
            shown("http://user:hunter2@127.0.0.1:9000/a"),
            "127.0.0.1:9000"
        );
        assert_eq!(shown("https://token@api.example.com/x"), "api.example.com");
        assert_eq!(shown("https://u:p@[::1]:8443/"), "[::1]:8443");
    }

    #[test]
    fn a_bracketed_pattern_is_an_ipv6_address_or_refused() {
        assert!("[::1]:80".parse::<HostPattern>().is_ok());
        assert!("[2001:db8::7]:*".parse::<HostPattern>().is_ok());
        for bad in [
            "[zzz]:80",
            "[]:80",
            "*.[::1]:80",
            "[127.0.0.1]:80",
            "[::1:80",
        ] {
            assert!(bad.parse::<HostPattern>().is_err(), "{bad}");
        }
    }

    fn rules(allowlist: Allowlist) -> OutboundRules {
        OutboundRules {
            provider: "test".into(),
            allowlist: Arc::new(allowlist),
            response_bytes: 1024,
            tls: super::super::tls_pins::client_config(&BTreeMap::new()),
            names: NameResolver::system(),
            pool: Arc::default(),
        }
    }

    #[test]
    fn userinfo_and_unlisted_names_are_refused_before_any_lookup() {
        let rules = rules(Allowlist::parse(&["127.0.0.1:9000"]).unwrap());
        let uri = |text: &str| text.parse::<http::Uri>().unwrap();
        assert_eq!(
            rules.check_name(&uri("http://127.0.0.1:9000/a")),
            Ok(Named {
                host: "127.0.0.1".into(),
                port: 9000,
                tls: false
            })
        );
        let userinfo = rules.check_name(&uri("http://user:pw@127.0.0.1:9000/a"));
        assert!(userinfo.is_err_and(|why| why.contains("userinfo")));
        assert!(rules.check_name(&uri("https://127.0.0.1/a")).is_err());
    }

    #[tokio::test]
    async fn a_configured_endpoint_is_a_name_to_reach_never_a_restricted_address() {
        let config: BTreeMap<String, String> = [
            ("agents", "http://127.0.0.1:9000, http://10.0.0.7:7070"),
            ("metadata", "http://169.254.169.254/latest/meta-data"),
            ("endpoint", "https://api.example.com/v1"),
        ]
        .into_iter()
        .map(|(key, value)| (key.into(), value.into()))
        .collect();
        let configured = Allowlist::default().with_endpoints(&config);
        assert_eq!(
            configured.patterns().collect::<Vec<_>>(),
            [
                "10.0.0.7:7070",
                "127.0.0.1:9000",
                "169.254.169.254:80",
                "api.example.com:443"
            ]
        );
        for (host, port) in [
            ("127.0.0.1", 9000),
            ("10.0.0.7", 7070),
            ("169.254.169.254", 80),
        ] {
            assert!(configured.allows(host, port), "{host}:{port}");
            let refused =
                OutboundRules::resolve(&NameResolver::system(), &configured, host, port).await;
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|why| why.contains("address the allowlist does not name")),
                "{host}:{port}: {refused:?}"
            );
        }
        // Listed by the operator as well: reachable, and listed once.
        let listed = Allowlist::parse(&["127.0.0.1:9000"])
            .unwrap()
            .with_endpoints(&config);
        assert_eq!(
            listed.patterns().filter(|p| p == "127.0.0.1:9000").count(),
            1
        );
        assert_eq!(
            OutboundRules::resolve(&NameResolver::system(), &listed, "127.0.0.1", 9000).await,
            Ok("127.0.0.1:9000".parse().unwrap())
        );
        assert!(
            OutboundRules::resolve(&NameResolver::system(), &listed, "169.254.169.254", 80)
                .await
                .is_err()
        );
    }

    #[test]
    fn timeouts_are_the_plugins_or_the_defaults_and_never_outlast_the_call() {
        let deadline = Duration::from_secs(8);
        assert_eq!(
            Timeouts::of(None, deadline),
            Timeouts {
                connect: CONNECT_TIMEOUT,
                first_byte: deadline,
                between_bytes: deadline,
            }
        );
        let asked = RequestOptions {
            connect_timeout: Some(Duration::from_millis(200)),
            first_byte_timeout: Some(Duration::from_secs(60)),
            between_bytes_timeout: Some(Duration::from_secs(1)),
        };
        assert_eq!(
            Timeouts::of(Some(asked), deadline),
            Timeouts {
                connect: Duration::from_millis(200),
                first_byte: deadline,
                between_bytes: Duration::from_secs(1),
            }
        );
        let short = Timeouts::of(None, Duration::from_millis(300));
        assert_eq!(short.connect, Duration::from_millis(300));
    }

    /// A call's policy with an empty allowlist and a 1 s deadline.
    fn policy_for_tests() -> OutboundPolicy {
        OutboundPolicy::new(
            "test".into(),
            Arc::new(Allowlist::default()),
            1024,
            super::super::tls_pins::client_config(&BTreeMap::new()),
            Duration::from_secs(1),
            NameResolver::system(),
            Arc::default(),
        )
    }

    #[tokio::test]
    async fn a_call_has_at_most_16_requests_in_flight() {
        let policy = policy_for_tests();
        let mut held: Vec<_> = (0..REQUESTS_IN_FLIGHT_PER_CALL)
            .map(|_| policy.admit("127.0.0.1:9000").unwrap())
            .collect();
        assert!(matches!(
            policy.admit("127.0.0.1:9000"),
            Err(HttpError::ConnectionLimitReached)
        ));
        held.pop();
        assert!(
            policy.admit("127.0.0.1:9000").is_ok(),
            "a closed request's place is free again"
        );
    }

    #[tokio::test]
    async fn the_end_of_a_call_cancels_its_requests() {
        let policy = policy_for_tests();
        let watching = policy.call_over.clone();
        let requests = policy.requests();
        let in_flight = policy.admit("127.0.0.1:9000").unwrap();
        let request = tokio::spawn(async move {
            let _in_flight = in_flight;
            watching.cancelled().await;
        });
        drop(policy);
        tokio::time::timeout(Duration::from_secs(1), requests.dropped("test"))
            .await
            .expect("the call's end waits for its requests, and they end with it");
        request.await.unwrap();
    }

    #[test]
    fn plain_http_leaves_the_host_for_loopback_only() {
        let at = |text: &str| text.parse::<SocketAddr>().unwrap();
        assert!(cleartext_check(at("127.0.0.1:9000"), false).is_ok());
        assert!(cleartext_check(at("[::1]:9000"), false).is_ok());
        assert!(cleartext_check(at("[::ffff:127.0.0.1]:9000"), false).is_ok());
        for remote in ["10.0.0.5:7070", "203.0.113.7:80", "[2001:db8::1]:80"] {
            assert!(cleartext_check(at(remote), false).is_err(), "{remote}");
            assert!(
                cleartext_check(at(remote), true).is_ok(),
                "{remote} over TLS"
            );
        }
    }

    #[test]
    fn bad_patterns_are_refused_with_the_reason() {
        for bad in [
            "example.com",
            "example.com:0",
            "example.com:http",
            "exa mple.com:80",
            ":80",
        ] {
            assert!(bad.parse::<HostPattern>().is_err(), "{bad} was accepted");
        }
        assert_eq!(
            "*.Example.com:*"
                .parse::<HostPattern>()
                .unwrap()
                .to_string(),
            "*.example.com:*"
        );
    }
}
