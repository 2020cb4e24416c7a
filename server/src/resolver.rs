//! The DNS resolvers the server builds (domain verification, plugins' name lookups): the
//! system's configuration (`/etc/resolv.conf`, the hosts file), or, where there is none, an
//! empty one that answers nothing, with a warning saying what `consequence` follows. A
//! missing configuration never stops the server from starting.

use hickory_resolver::config::ResolverConfig;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{ResolverBuilder, TokioResolver};

/// A builder of the system's configuration, or of an empty one.
pub fn system_or_empty(consequence: &str) -> ResolverBuilder<TokioRuntimeProvider> {
    TokioResolver::builder_tokio().unwrap_or_else(|err| {
        tracing::warn!(error = %err, "no DNS configuration: {consequence}");
        empty()
    })
}

/// A builder with no name server.
pub fn empty() -> ResolverBuilder<TokioRuntimeProvider> {
    TokioResolver::builder_with_config(ResolverConfig::default(), TokioRuntimeProvider::default())
}
