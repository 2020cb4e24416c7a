//! A routing table as a Caddy (2.6 and later) JSON configuration: one HTTP server with a
//! reverse proxy per domain, round-robin across its upstreams (a weight repeats an upstream),
//! retries on another upstream when one refuses (and, for GET, HEAD and OPTIONS, when one
//! fails mid-request), and passive health checks; a domain without
//! upstreams answers 503 and an unknown host 404.
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
    pub listen: Vec<String>,
    pub admin: Option<String>,
}

/// The `@id` Caddy knows the configuration of `revision` by.
pub fn revision_id(revision: i64) -> String {
    format!("bulkhead-r{revision}")
}

/// The configuration that serves `table`.
pub fn config(table: &RoutingTable, options: &CaddyOptions) -> Value {
    let mut routes: Vec<Value> = table.routes.iter().map(route).collect();
    routes.push(json!({
        "handle": [{ "handler": "static_response", "status_code": 404, "body": "unknown domain\n" }],
        "terminal": true,
    }));
    let mut config = json!({
        "apps": { "http": { "servers": { "bulkhead": {
            "listen": options.listen,
            // Edges terminate plain HTTP here; certificates are the proxy operator's business.
            // The revision's `@id` sits on this small object: `GET /id/…` answers it cheaply.
            "automatic_https": { "@id": revision_id(table.revision), "disable": true },
            "routes": routes,
        }}}}
    });
    if let Some(admin) = &options.admin {
        config["admin"] = json!({ "listen": admin });
    }
    config
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
}
