//! How a project proves it controls a hostname: it publishes a TXT record
//! `bulkhead-verification=<token>` at `_bulkhead-challenge.<hostname>`, and Bulkhead asks DNS
//! for it (as ACME's `dns-01` and the big hosting platforms do). The question goes to the
//! system's resolvers, or to `--dns-resolver` (tests and `bulkhead dev` point it at the DNS
//! simulator), with no cache: a record just published is seen on the next try.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;

use crate::error::{AppError, AppResult, ErrorCode};

/// The label under which a hostname's challenge is published.
pub const CHALLENGE_LABEL: &str = "_bulkhead-challenge";
/// What the TXT record's value starts with; the token follows.
pub const CHALLENGE_PREFIX: &str = "bulkhead-verification=";

/// The name the challenge of `hostname` is published at.
pub fn challenge_name(hostname: &str) -> String {
    format!("{CHALLENGE_LABEL}.{hostname}")
}

/// The TXT value that proves control of a domain with `token`.
pub fn challenge_value(token: &str) -> String {
    format!("{CHALLENGE_PREFIX}{token}")
}

/// Asks DNS for challenge records.
pub struct ChallengeResolver {
    resolver: TokioResolver,
}

impl ChallengeResolver {
    /// A resolver of `server` (UDP and TCP), or of the system's configuration.
    pub fn new(server: Option<SocketAddr>) -> anyhow::Result<Self> {
        let mut builder = match server {
            Some(server) => {
                let connections = [ConnectionConfig::udp(), ConnectionConfig::tcp()]
                    .into_iter()
                    .map(|mut connection| {
                        connection.port = server.port();
                        connection
                    })
                    .collect();
                let mut name_server = NameServerConfig::udp_and_tcp(server.ip());
                name_server.connections = connections;
                TokioResolver::builder_with_config(
                    ResolverConfig::from_parts(None, Vec::new(), vec![name_server]),
                    TokioRuntimeProvider::default(),
                )
            }
            // Without a system configuration verifications answer 503 `dns_unavailable`.
            None => crate::resolver::system_or_empty(
                "domains cannot be verified until --dns-resolver is set",
            ),
        };
        let options = builder.options_mut();
        // A record just published must be seen on the next try.
        options.cache_size = 0;
        options.timeout = Duration::from_secs(3);
        options.attempts = 2;
        let resolver = builder
            .build()
            .map_err(|err| anyhow::anyhow!("building the DNS resolver: {err}"))?;
        Ok(Self { resolver })
    }

    /// The TXT values published at `name` (none when the name or its records do not exist);
    /// 503 `dns_unavailable` when DNS could not answer.
    pub async fn txt_values(&self, name: &str) -> AppResult<Vec<String>> {
        // Fully qualified: no search domain is tried.
        match self.resolver.txt_lookup(format!("{name}.")).await {
            Ok(lookup) => Ok(lookup
                .answers()
                .iter()
                .filter_map(|record| match &record.data {
                    RData::TXT(txt) => Some(txt.to_string()),
                    _ => None,
                })
                .collect()),
            Err(err) if err.is_no_records_found() || err.is_nx_domain() => Ok(Vec::new()),
            Err(err) => {
                tracing::warn!(name, error = %err, "domain verification: DNS did not answer");
                Err(AppError::new(
                    ErrorCode::DnsUnavailable,
                    "DNS did not answer the verification question; try again shortly",
                )
                .retry_after(5))
            }
        }
    }
}
