//! Who the client is, by address: the peer of the connection, or — when the peer is one of the
//! operator's `--trusted-proxies` — the address those proxies say they received the request
//! from, in the one header they write (`--client-address-header`: `X-Forwarded-For`, as nginx,
//! HAProxy, Caddy, Envoy and the clouds' load balancers write it, or `Forwarded: for=…`, RFC
//! 7239). Login throttling and the request log use it.
//!
//! Only that header is read: a proxy passes the other one through as the client wrote it. It is
//! read from the right, the end the nearest proxy appended: each address that is itself a
//! trusted proxy is stepped over, and the first that is not is the client. What a client wrote
//! further left is never believed, so a client cannot pick another address to dodge its login
//! limit or to lock someone else out. An entry that is not an address (`unknown`, an obfuscated
//! name) ends the walk at the last proxy that handed it on.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use ipnet::IpNet;

/// The client's address, as a request extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The header trusted proxies name the client in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAddressHeader {
    #[default]
    XForwardedFor,
    Forwarded,
}

/// The proxies whose forwarding header is believed, and which header that is.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    pub proxies: Vec<IpNet>,
    pub header: ClientAddressHeader,
}

impl TrustedProxies {
    fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.proxies.iter().any(|net| net.contains(&ip))
    }
}

/// Puts the request's [`ClientAddr`] in its extensions.
pub async fn client_addr_resolve(
    State(trusted): State<Arc<TrustedProxies>>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    if let Some(peer) = peer {
        let client = client_addr_of(peer, request.headers(), &trusted);
        request.extensions_mut().insert(ClientAddr(client));
    }
    next.run(request).await
}

/// The client's address for a request from `peer` with `headers`.
pub fn client_addr_of(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    let peer = peer.to_canonical();
    if !trusted.contains(peer) {
        return peer;
    }
    let hops = match trusted.header {
        ClientAddressHeader::XForwardedFor => x_forwarded_for(headers),
        ClientAddressHeader::Forwarded => forwarded_for(headers),
    };
    let Some(hops) = hops else {
        return peer;
    };
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop {
            Some(ip) if trusted.contains(*ip) => client = *ip,
            Some(ip) => return *ip,
            None => return client,
        }
    }
    client
}

/// The `for=` of each element of the `Forwarded` headers, in order (`None` for one that is not
/// an address); `None` when there is no `Forwarded` header with a `for=`.
fn forwarded_for(headers: &HeaderMap) -> Option<Vec<Option<IpAddr>>> {
    let mut hops = Vec::new();
    for value in headers.get_all("forwarded") {
        let Ok(value) = value.to_str() else {
            hops.push(None);
            continue;
        };
        for element in value.split(',') {
            let node = element.split(';').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| value.trim().trim_matches('"'))
            });
            if let Some(node) = node {
                hops.push(node_parse(node));
            }
        }
    }
    (!hops.is_empty()).then_some(hops)
}

/// The addresses of the `X-Forwarded-For` headers, in order.
fn x_forwarded_for(headers: &HeaderMap) -> Option<Vec<Option<IpAddr>>> {
    let mut hops = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        match value.to_str() {
            Ok(value) => hops.extend(value.split(',').map(|hop| node_parse(hop.trim()))),
            Err(_) => hops.push(None),
        }
    }
    (!hops.is_empty()).then_some(hops)
}

/// An address as a forwarding header writes it: `192.0.2.1`, `192.0.2.1:443`, `[2001:db8::1]`,
/// `[2001:db8::1]:443` or a bare IPv6 address.
fn node_parse(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(socket) = node.parse::<SocketAddr>() {
        return Some(socket.ip().to_canonical());
    }
    let bracketed = node.strip_prefix('[')?.split(']').next()?;
    bracketed.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(nets: &[&str]) -> TrustedProxies {
        trusted_by(nets, ClientAddressHeader::XForwardedFor)
    }

    fn trusted_by(nets: &[&str], header: ClientAddressHeader) -> TrustedProxies {
        TrustedProxies {
            proxies: nets.iter().map(|net| net.parse().unwrap()).collect(),
            header,
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().unwrap());
        }
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let proxies = trusted(&["10.0.0.0/8"]);
        let forged = headers(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("forwarded", "for=203.0.113.9"),
        ]);
        assert_eq!(
            client_addr_of(ip("198.51.100.7"), &forged, &proxies),
            ip("198.51.100.7")
        );
        assert_eq!(
            client_addr_of(ip("198.51.100.7"), &forged, &TrustedProxies::default()),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_address_is_the_client() {
        let proxies = trusted(&["10.0.0.0/8", "2001:db8:ff::/48"]);
        let peer = ip("10.0.0.2");
        // The client wrote a fake address first; the proxies appended the real one.
        let chain = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.1")]);
        assert_eq!(client_addr_of(peer, &chain, &proxies), ip("198.51.100.7"));
        // Several headers are one list, in order.
        let split = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.7"),
        ]);
        assert_eq!(client_addr_of(peer, &split, &proxies), ip("198.51.100.7"));
        // Only the configured header is read: a proxy that writes X-Forwarded-For passes a
        // client's own Forwarded through, and the other way round.
        let both = headers(&[
            (
                "forwarded",
                "for=6.6.6.6;proto=https, for=\"[2001:db8:cafe::17]:4711\"",
            ),
            ("forwarded", "for=\"[2001:db8:ff::1]\";by=10.0.0.2"),
            ("x-forwarded-for", "198.51.100.7"),
        ]);
        assert_eq!(client_addr_of(peer, &both, &proxies), ip("198.51.100.7"));
        // Forwarded, with ports, quotes and IPv6.
        let by_forwarded = trusted_by(
            &["10.0.0.0/8", "2001:db8:ff::/48"],
            ClientAddressHeader::Forwarded,
        );
        assert_eq!(
            client_addr_of(peer, &both, &by_forwarded),
            ip("2001:db8:cafe::17")
        );
        // Nothing forwarded: the proxy itself.
        assert_eq!(client_addr_of(peer, &HeaderMap::new(), &proxies), peer);
        // Every hop trusted: the leftmost.
        let internal = headers(&[("x-forwarded-for", "10.1.1.1, 10.0.0.1")]);
        assert_eq!(client_addr_of(peer, &internal, &proxies), ip("10.1.1.1"));
        // An entry that is no address stops the walk at the proxy that handed it on.
        let hidden = headers(&[("forwarded", "for=6.6.6.6, for=_hidden, for=10.0.0.1")]);
        assert_eq!(client_addr_of(peer, &hidden, &by_forwarded), ip("10.0.0.1"));
        let garbage = headers(&[("x-forwarded-for", "198.51.100.7, not-an-ip")]);
        assert_eq!(client_addr_of(peer, &garbage, &proxies), peer);
        // An IPv4-mapped peer is the IPv4 address.
        assert_eq!(
            client_addr_of(ip("::ffff:10.0.0.2"), &chain, &proxies),
            ip("198.51.100.7")
        );
    }
}
