//! The addresses that the outbound calls a project configures may reach: its webhook endpoints
//! and its forge's API (commit statuses). A project admin chooses these URLs, so they must not
//! become a way into the platform's own network: a private, loopback, link-local (the cloud
//! metadata service), or otherwise unroutable address ([`crate::plugins::address_restricted`])
//! is refused, unless the operator allowed its network (`--webhook-allowed-networks`).
//!
//! - **When a URL is saved** ([`url_check`]): `https` (plain `http` only to an address the
//!   operator allowed), no user or password, no fragment, and an address literal is checked.
//! - **When a name resolves**, before every connection: [`CheckedResolver`] is the DNS
//!   resolver of a client, so the connection goes to the very addresses it checked (a second
//!   answer cannot rebind it), and a name that resolves to a refused address fails with
//!   [`AddressRefused`] ([`address_refusal`] finds it in a call's error).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

use crate::error::{AppError, AppResult};

/// Whether `ip` may be reached: it is public, or in a network the operator allowed.
pub fn address_allowed(allowed: &[IpNet], ip: IpAddr) -> bool {
    crate::plugins::address_restricted(ip).is_none() || allowed.iter().any(|net| net.contains(&ip))
}

/// Checks the URL of field `field` as far as it can without resolving its name.
pub fn url_check(
    allowed: &[IpNet],
    field: &str,
    text: &str,
    max_len: usize,
) -> AppResult<url::Url> {
    let refuse = |why: String| AppError::invalid(format!("`{field}` {why}"));
    if text.is_empty() || text.len() > max_len {
        return Err(refuse(format!("must be 1 to {max_len} characters")));
    }
    let url = url::Url::parse(text).map_err(|err| refuse(format!("is not a URL: {err}")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("must not hold a user or password".into()));
    }
    if url.fragment().is_some() {
        return Err(refuse("must not have a fragment".into()));
    }
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        Some(url::Host::Domain(_)) => None,
        None => return Err(refuse("has no host".into())),
    };
    if let Some(ip) = ip
        && !address_allowed(allowed, ip)
    {
        return Err(refuse(format!(
            "names a {} address, which a project's outbound calls may not reach",
            crate::plugins::address_restricted(ip).unwrap_or("restricted")
        )));
    }
    match url.scheme() {
        "https" => {}
        // Only an address the operator allowed on purpose (a receiver on the platform's own
        // network); anything on the way to a public address would read it in clear.
        "http" if ip.is_some_and(|ip| crate::plugins::address_restricted(ip).is_some()) => {}
        _ => {
            return Err(refuse(
                "must be `https` (`http` only to an address the operator allowed)".into(),
            ));
        }
    }
    Ok(url)
}

/// A name that resolved to an address outbound calls may not reach.
#[derive(Debug)]
pub struct AddressRefused {
    pub host: String,
    pub ip: IpAddr,
}

impl std::fmt::Display for AddressRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` resolves to {}, a {} address a project's outbound calls may not reach",
            self.host,
            self.ip,
            crate::plugins::address_restricted(self.ip).unwrap_or("restricted")
        )
    }
}

impl std::error::Error for AddressRefused {}

/// The [`AddressRefused`] behind a call's error, if that is why it failed.
pub fn address_refusal<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a AddressRefused> {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(refused) = err.downcast_ref::<AddressRefused>() {
            return Some(refused);
        }
        cause = err.source();
    }
    None
}

/// A DNS resolver that answers only with addresses outbound calls may reach: a name with any
/// refused address fails whole (a name that resolves to a public and a private address is
/// not half trusted).
#[derive(Clone)]
pub struct CheckedResolver {
    allowed: Arc<[IpNet]>,
}

impl CheckedResolver {
    pub fn new(allowed: &[IpNet]) -> Self {
        Self {
            allowed: allowed.into(),
        }
    }

    /// The addresses of `host`, checked.
    pub async fn resolve_checked(
        &self,
        host: &str,
    ) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
        if let Some(refused) = found
            .iter()
            .find(|addr| !address_allowed(&self.allowed, addr.ip()))
        {
            return Err(Box::new(AddressRefused {
                host: host.to_owned(),
                ip: refused.ip(),
            }));
        }
        Ok(found)
    }
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = self.clone();
        Box::pin(async move {
            let found = resolver.resolve_checked(name.as_str()).await?;
            Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_reach_public_addresses_or_allowed_ones() {
        let none: &[IpNet] = &[];
        let loopback: &[IpNet] = &["127.0.0.0/8".parse().unwrap()];
        assert!(url_check(none, "url", "https://hooks.example.com/x", 100).is_ok());
        assert!(url_check(loopback, "url", "http://127.0.0.1:8080/x", 100).is_ok());
        for bad in [
            "http://127.0.0.1:8080/x",
            "https://169.254.169.254/latest/meta-data",
            "https://10.0.0.5/x",
            "https://[fd00::1]/x",
            "https://[::ffff:10.0.0.5]/x",
            "http://hooks.example.com/x",
            "https://user:pw@hooks.example.com/x",
            "https://hooks.example.com/x#f",
            "not a url",
        ] {
            assert!(url_check(none, "url", bad, 100).is_err(), "{bad}");
        }
        // Allowed loopback is not a licence for plain http to public names.
        assert!(url_check(loopback, "url", "http://hooks.example.com/x", 100).is_err());
        assert!(
            url_check(
                none,
                "url",
                &format!("https://{}.com", "a".repeat(100)),
                100
            )
            .is_err()
        );
    }

    #[tokio::test]
    async fn names_that_resolve_to_refused_addresses_fail_with_the_reason() {
        let refusing = CheckedResolver::new(&[]);
        let err = refusing.resolve_checked("localhost").await.unwrap_err();
        let refused = address_refusal(err.as_ref()).expect("an address refusal");
        assert!(refused.ip.is_loopback());
        assert!(refused.to_string().contains("loopback"), "{refused}");

        let allowing =
            CheckedResolver::new(&["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]);
        let found = allowing.resolve_checked("localhost").await.unwrap();
        assert!(!found.is_empty() && found.iter().all(|a| a.ip().is_loopback()));
    }
}
