//! Name lookups of plugins' outbound requests: asynchronous, on hickory-resolver with the
//! system's configuration (`/etc/resolv.conf`, `/etc/hosts`), so that a lookup is dropped
//! with its request when the call ends. (`getaddrinfo`, behind `tokio::net::lookup_host`,
//! runs on a blocking thread that cannot be cancelled: a plugin asking for slow names could
//! keep threads busy after its call.) Answers are cached by their TTL, as a stub resolver does.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_resolver::TokioResolver;

/// The resolver of one plugin host (lookups run on the runtime that asks).
#[derive(Clone)]
pub struct NameResolver(Arc<TokioResolver>);

impl NameResolver {
    /// A resolver of the system's configuration; without one (no readable
    /// `/etc/resolv.conf`), one that knows only the hosts file, and says so.
    pub fn system() -> Self {
        let resolver = crate::resolver::system_or_empty(
            "plugins' requests reach only names in the hosts file",
        )
        .build()
        .unwrap_or_else(|err| {
            tracing::warn!(error = %err, "the DNS resolver did not build; using an empty one");
            crate::resolver::empty()
                .build()
                .expect("an empty configuration builds")
        });
        Self(Arc::new(resolver))
    }

    /// The addresses of `host` (a name, not an IP literal), each with `port`.
    pub async fn lookup(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let answer = self
            .0
            .lookup_ip(host)
            .await
            .map_err(|err| format!("name lookup failed: {err}"))?;
        Ok(answer.iter().map(|ip| SocketAddr::new(ip, port)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_of_the_hosts_file_resolve_with_their_port() {
        let addresses = NameResolver::system()
            .lookup("localhost", 9000)
            .await
            .unwrap();
        assert!(
            addresses
                .iter()
                .any(|address| address.ip().is_loopback() && address.port() == 9000),
            "{addresses:?}"
        );
    }
}
