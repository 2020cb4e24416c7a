//! A routing table as a Caddy (2.6 and later) JSON configuration: a reverse proxy per domain,
//! round-robin across its upstreams (a weight repeats an upstream), retries on another upstream
//! when one refuses (and, for GET, HEAD and OPTIONS, when one fails mid-request), and passive
//! health checks; a domain without upstreams answers 503 and an unknown host 404.
//!
//! Over plain HTTP only, or (with [`CaddyTls`]) over HTTPS with certificates issued on demand by
//! an ACME CA: Caddy asks a permission endpoint (the edge agent's, answered from its signed
//! snapshot) before it issues one, and completes TLS handshakes only for the table's domains, so
//! a domain removed from the table is refused at once even while its certificate is cached.
//! Plain HTTP then redirects the table's domains to HTTPS (Caddy answers ACME's HTTP-01
//! challenges before any route).
//!
//! The configuration carries the table's revision as an `@id` (`bulkhead-r<revision>`), so the
//! edge agent can ask Caddy (`GET /id/…`) whether what it applied is still loaded: after a
//! restart without `--resume` it is not, and the agent applies it again.

use serde_json::{Value, json};

use super::{Route, RoutingTable};

/// Where Caddy serves the routes, and where its admin API listens (kept as it is when the edge
/// agent loads a configuration; `None` leaves Caddy's default).
#[derive(Debug, Clone)]
pub struct CaddyOptions {
    /// Where Caddy serves plain HTTP: the routes, or with `tls` redirects to HTTPS.
    pub listen: Vec<String>,
    pub admin: Option<String>,
    pub tls: Option<CaddyTls>,
}

/// HTTPS with certificates issued on demand.
#[derive(Debug, Clone)]
pub struct CaddyTls {
    /// Where Caddy serves HTTPS.
    pub listen: Vec<String>,
    /// The ACME CA's directory URL.
    pub acme_ca: String,
    pub acme_email: Option<String>,
    /// PEM files of the roots that sign the ACME CA's own HTTPS certificate (a private CA).
    pub acme_ca_roots: Vec<String>,
    /// The permission endpoint Caddy asks (`?domain=…`) before it issues a certificate.
    pub ask: String,
    /// The directory Caddy keeps certificates and ACME accounts in.
    pub storage: String,
    /// A file Caddy writes its certificate events to (JSON lines), for the edge agent to read.
    pub events_log: Option<String>,
}

/// The loggers of Caddy's certificate events: obtaining, renewing, on-demand decisions.
pub const CERTIFICATE_LOGGERS: [&str; 3] = ["tls.obtain", "tls.renew", "tls.on_demand"];

/// The `@id` Caddy knows the configuration of `revision` by.
pub fn revision_id(revision: i64) -> String {
    format!("bulkhead-r{revision}")
}

/// The configuration that serves `table`.
pub fn config(table: &RoutingTable, options: &CaddyOptions) -> Value {
    let mut routes: Vec<Value> = table.routes.iter().map(route).collect();
    routes.push(unknown_domain());
    let mut config = match &options.tls {
        None => json!({
            "apps": { "http": { "servers": { "bulkhead": {
                "listen": options.listen,
                // The revision's `@id` sits on this small object: `GET /id/…` answers it
                // cheaply.
                "automatic_https": { "@id": revision_id(table.revision), "disable": true },
                "routes": routes,
            }}}}
        }),
        Some(tls) => tls_config(table, options, tls, routes),
    };
    if let Some(admin) = &options.admin {
        config["admin"] = json!({ "listen": admin });
    }
    config
}

fn tls_config(
    table: &RoutingTable,
    options: &CaddyOptions,
    tls: &CaddyTls,
    routes: Vec<Value>,
) -> Value {
    let domains: Vec<&str> = table.routes.iter().map(|r| r.domain.as_str()).collect();
    let https_port = listen_port(&tls.listen).unwrap_or(443);
    let http_port = listen_port(&options.listen).unwrap_or(80);
    let location = if https_port == 443 {
        "https://{http.request.host}{http.request.uri}".to_owned()
    } else {
        format!("https://{{http.request.host}}:{https_port}{{http.request.uri}}")
    };
    let mut redirects = Vec::new();
    if !domains.is_empty() {
        redirects.push(json!({
            "match": [{ "host": domains }],
            "handle": [{
                "handler": "static_response",
                "status_code": 308,
                "headers": { "Location": [location] },
            }],
            "terminal": true,
        }));
    }
    redirects.push(unknown_domain());
    let mut issuer = json!({ "module": "acme", "ca": tls.acme_ca });
    if let Some(email) = &tls.acme_email {
        issuer["email"] = json!(email);
    }
    if !tls.acme_ca_roots.is_empty() {
        issuer["trusted_roots_pem_files"] = json!(tls.acme_ca_roots);
    }
    let mut config = json!({
        "storage": { "module": "file_system", "root": tls.storage },
        "apps": {
            "tls": { "automation": {
                "policies": [{ "issuers": [issuer], "on_demand": true }],
                "on_demand": { "ask": tls.ask },
            }},
            "http": {
                "http_port": http_port,
                "https_port": https_port,
                "servers": {
                    "bulkhead": {
                        "listen": tls.listen,
                        "automatic_https": {
                            "@id": revision_id(table.revision),
                            "disable_redirects": true,
                        },
                        // A handshake for a name outside the table finds no policy and fails,
                        // whatever Caddy has cached or stored for it.
                        "tls_connection_policies": [{ "match": { "sni": domains } }],
                        "routes": routes,
                    },
                    "bulkhead-http": {
                        "listen": options.listen,
                        "automatic_https": { "disable": true },
                        "routes": redirects,
                    },
                },
            },
        },
    });
    if let Some(events_log) = &tls.events_log {
        config["logging"] = json!({ "logs": { "bulkhead-certificates": {
            "writer": {
                "output": "file",
                "filename": events_log,
                "roll_size_mb": 1,
                "roll_keep": 1,
            },
            "encoder": { "format": "json" },
            "level": "INFO",
            "include": CERTIFICATE_LOGGERS,
        }}});
    }
    config
}

/// The port of the first listen address (`host:port` or `:port`).
fn listen_port(listen: &[String]) -> Option<u16> {
    listen.first()?.rsplit_once(':')?.1.parse().ok()
}

fn unknown_domain() -> Value {
    json!({
        "handle": [{ "handler": "static_response", "status_code": 404, "body": "unknown domain\n" }],
        "terminal": true,
    })
}

fn route(route: &Route) -> Value {
    let handler = if route.upstreams.is_empty() {
        json!({
            "handler": "static_response",
            "status_code": 503,
            "body": "no healthy instance\n",
        })
    } else {
        json!({
            "handler": "reverse_proxy",
            "upstreams": upstreams(route),
            "load_balancing": {
                "selection_policy": { "policy": "round_robin" },
                "try_duration": "2s",
                // Short: Caddy 2.6 gives up a retry when a configuration load replaces the
                // handler while the request waits between tries (its context ends), and the
                // edge loads one per routing revision; the drill saw 502s from that window.
                "try_interval": "10ms",
                // Requests that cannot change anything are retried on another upstream even
                // when the failure came after the connection was made (an instance that died
                // with connections open, a pooled connection to it); Caddy 2.6 retries only
                // failed connections otherwise.
                "retry_match": [{ "method": ["GET", "HEAD", "OPTIONS"] }],
            },
            "health_checks": { "passive": {
                "fail_duration": "10s",
                "max_fails": 1,
                "unhealthy_status": [502, 503, 504],
            }},
        })
    };
    json!({
        "match": [{ "host": [route.domain] }],
        "handle": [handler],
        "terminal": true,
    })
}

/// Each upstream repeated by its weight over the greatest common divisor of the weights
/// (Caddy 2.6 has no weighted policy), at most 16 times.
fn upstreams(route: &Route) -> Vec<Value> {
    let divisor = route
        .upstreams
        .iter()
        .map(|u| u.weight.max(1))
        .fold(0, gcd)
        .max(1);
    route
        .upstreams
        .iter()
        .flat_map(|upstream| {
            let copies = (upstream.weight.max(1) / divisor).min(16);
            std::iter::repeat_n(json!({ "dial": upstream.address }), copies as usize)
        })
        .collect()
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Upstream;

    #[test]
    fn weights_repeat_upstreams_and_empty_routes_answer_503() {
        let upstream = |key: &str, weight| Upstream {
            address: format!("{key}:80"),
            provider: "metal".into(),
            region: "local".into(),
            instance_key: key.into(),
            weight,
        };
        let table = RoutingTable {
            revision: 9,
            generated_at: chrono::Utc::now(),
            drop_intended: false,
            routes: vec![
                Route {
                    domain: "a.example".into(),
                    project_id: uuid::Uuid::nil(),
                    service_id: uuid::Uuid::nil(),
                    upstreams: vec![upstream("x", 2), upstream("y", 4)],
                },
                Route {
                    domain: "b.example".into(),
                    project_id: uuid::Uuid::nil(),
                    service_id: uuid::Uuid::nil(),
                    upstreams: vec![],
                },
            ],
        };
        let options = CaddyOptions {
            listen: vec![":8080".into()],
            admin: Some("127.0.0.1:2999".into()),
            tls: None,
        };
        let config = config(&table, &options);
        let server = &config["apps"]["http"]["servers"]["bulkhead"];
        assert_eq!(server["automatic_https"]["@id"], "bulkhead-r9");
        let dials = server["routes"][0]["handle"][0]["upstreams"]
            .as_array()
            .unwrap();
        assert_eq!(dials.len(), 3, "{dials:?}");
        let balancing = &server["routes"][0]["handle"][0]["load_balancing"];
        assert_eq!(
            balancing["retry_match"][0]["method"][0], "GET",
            "a GET that failed mid-request is retried on another upstream: {balancing}"
        );
        assert_eq!(server["routes"][1]["handle"][0]["status_code"], 503);
        assert_eq!(server["routes"][2]["handle"][0]["status_code"], 404);
        assert_eq!(config["admin"]["listen"], "127.0.0.1:2999");
    }

    #[test]
    fn tls_serves_the_table_s_domains_alone_and_redirects_plain_http() {
        let table = RoutingTable {
            revision: 4,
            generated_at: chrono::Utc::now(),
            drop_intended: false,
            routes: vec![Route {
                domain: "shop.example".into(),
                project_id: uuid::Uuid::nil(),
                service_id: uuid::Uuid::nil(),
                upstreams: vec![],
            }],
        };
        let options = CaddyOptions {
            listen: vec![":8080".into()],
            admin: None,
            tls: Some(CaddyTls {
                listen: vec!["127.0.0.1:8443".into()],
                acme_ca: "https://ca.example/dir".into(),
                acme_email: None,
                acme_ca_roots: vec![],
                ask: "http://127.0.0.1:9180/tls/ask".into(),
                storage: "/var/lib/edge/certificates".into(),
                events_log: None,
            }),
        };
        let config = config(&table, &options);
        let https = &config["apps"]["http"]["servers"]["bulkhead"];
        assert_eq!(https["automatic_https"]["@id"], "bulkhead-r4");
        assert_eq!(
            https["tls_connection_policies"][0]["match"]["sni"],
            json!(["shop.example"])
        );
        let redirect = &config["apps"]["http"]["servers"]["bulkhead-http"]["routes"][0];
        assert_eq!(
            redirect["handle"][0]["headers"]["Location"][0],
            "https://{http.request.host}:8443{http.request.uri}"
        );
        assert_eq!(config["apps"]["http"]["http_port"], 8080);
        assert_eq!(
            config["apps"]["tls"]["automation"]["on_demand"]["ask"],
            "http://127.0.0.1:9180/tls/ask"
        );
        assert!(
            config["apps"]["tls"]["automation"]["policies"][0]["issuers"][0]
                .get("email")
                .is_none()
        );
    }
}
