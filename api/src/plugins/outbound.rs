//! Outbound HTTP of plugins: the per-provider allowlist of `host:port` patterns and the
//! `wasi:http` hooks that enforce it and cap response bodies.
//!
//! A request whose authority is not on the allowlist never leaves the host: the plugin gets
//! `error-code.HTTP-request-denied`, the operator a warning naming the provider and the
//! refused authority, and `plugin_http_denied_total{provider}` counts it.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use http_body_util::{BodyExt, Limited};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

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
        let ipv6 = bare.starts_with('[') && bare.ends_with(']');
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
pub struct Allowlist(Vec<HostPattern>);

impl Allowlist {
    /// Parses every pattern, or says which one is wrong.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, String> {
        patterns
            .iter()
            .map(|pattern| pattern.as_ref().parse())
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether `host` (lowercase, as in a URI authority) and `port` are allowed.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        self.0.iter().any(|pattern| pattern.matches(&host, port))
    }

    pub fn patterns(&self) -> impl Iterator<Item = String> + '_ {
        self.0.iter().map(HostPattern::to_string)
    }
}

/// The `wasi:http` hooks of one plugin call.
pub(super) struct OutboundPolicy {
    pub provider: Arc<str>,
    pub allowlist: Arc<Allowlist>,
    /// Largest response body the plugin may read.
    pub response_bytes: u64,
}

impl OutboundPolicy {
    fn check(&self, uri: &http::Uri) -> Result<(), HttpError> {
        let host = uri.host().unwrap_or_default();
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme() == Some(&http::uri::Scheme::HTTP) {
                80
            } else {
                443
            });
        if self.allowlist.allows(host, port) {
            return Ok(());
        }
        tracing::warn!(
            provider = %self.provider,
            destination = %format!("{host}:{port}"),
            "plugin HTTP request refused: destination not on the provider's allowlist"
        );
        metrics::counter!("plugin_http_denied_total", "provider" => self.provider.to_string())
            .increment(1);
        Err(HttpError::HttpRequestDenied)
    }
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for OutboundPolicy {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        drop(fut);
        let checked = self.check(request.uri());
        let cap = self.response_bytes;
        Box::new(async move {
            checked?;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            let response = response.map(|body| {
                Limited::new(body, usize::try_from(cap).unwrap_or(usize::MAX))
                    .map_err(move |err| match err.downcast::<HttpError>() {
                        Ok(err) => *err,
                        Err(_) => HttpError::HttpResponseBodySize(Some(cap)),
                    })
                    .boxed_unsync()
            });
            Ok((
                response,
                Box::new(io) as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
            ))
        })
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
