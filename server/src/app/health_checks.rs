//! How the control plane checks a workload itself: an HTTP `GET` of a path on the instance's
//! own address, with a timeout, repeated at an interval, and thresholds of consecutive
//! results before the instance counts as healthy or unhealthy. A provider's API being down
//! says nothing about its workloads: only this check decides where traffic goes — made by the
//! control plane, or by the provider near the workload (a host agent) where it reports that it
//! does (see [`super::instance_health`]).

use std::time::Duration;

use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};
use crate::plugins::HealthCheck;

fn default_path() -> String {
    "/".into()
}
fn default_interval_ms() -> u64 {
    2000
}
fn default_timeout_ms() -> u64 {
    1000
}
fn default_healthy_threshold() -> u32 {
    1
}
fn default_unhealthy_threshold() -> u32 {
    3
}
fn default_start_timeout_secs() -> u32 {
    120
}

/// The health check of a service's instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckSpec {
    /// The path requested with `GET` (default `/`); any 2xx or 3xx answer passes.
    #[serde(default = "default_path")]
    #[schema(max_length = 200, pattern = "^/")]
    pub path: String,
    /// Milliseconds between checks (100 to 60000, default 2000).
    #[serde(default = "default_interval_ms")]
    #[schema(minimum = 100, maximum = 60000)]
    pub interval_ms: u64,
    /// Milliseconds a check may take (50 to 30000, default 1000).
    #[serde(default = "default_timeout_ms")]
    #[schema(minimum = 50, maximum = 30000)]
    pub timeout_ms: u64,
    /// Consecutive passes that make an instance healthy (1 to 10, default 1).
    #[serde(default = "default_healthy_threshold")]
    #[schema(minimum = 1, maximum = 10)]
    pub healthy_threshold: u32,
    /// Consecutive failures that make a healthy instance unhealthy (1 to 10, default 3).
    #[serde(default = "default_unhealthy_threshold")]
    #[schema(minimum = 1, maximum = 10)]
    pub unhealthy_threshold: u32,
    /// Seconds a new instance has to become healthy before its rollout fails (1 to 3600,
    /// default 120).
    #[serde(default = "default_start_timeout_secs")]
    #[schema(minimum = 1, maximum = 3600)]
    pub start_timeout_secs: u32,
}

impl Default for HealthCheckSpec {
    fn default() -> Self {
        Self {
            path: default_path(),
            interval_ms: default_interval_ms(),
            timeout_ms: default_timeout_ms(),
            healthy_threshold: default_healthy_threshold(),
            unhealthy_threshold: default_unhealthy_threshold(),
            start_timeout_secs: default_start_timeout_secs(),
        }
    }
}

impl HealthCheckSpec {
    pub fn validate(&self) -> ApiResult<()> {
        let path_ok = self.path.starts_with('/')
            && self.path.len() <= 200
            && self.path.parse::<http::uri::PathAndQuery>().is_ok();
        let checks = [
            (
                path_ok,
                "`health_check.path` must be a path starting with `/`, at most 200 characters",
            ),
            (
                (100..=60_000).contains(&self.interval_ms),
                "`health_check.interval_ms` must be 100 to 60000",
            ),
            (
                (50..=30_000).contains(&self.timeout_ms),
                "`health_check.timeout_ms` must be 50 to 30000",
            ),
            (
                (1..=10).contains(&self.healthy_threshold),
                "`health_check.healthy_threshold` must be 1 to 10",
            ),
            (
                (1..=10).contains(&self.unhealthy_threshold),
                "`health_check.unhealthy_threshold` must be 1 to 10",
            ),
            (
                (1..=3600).contains(&self.start_timeout_secs),
                "`health_check.start_timeout_secs` must be 1 to 3600",
            ),
        ];
        match checks.into_iter().find(|(ok, _)| !ok) {
            Some((_, message)) => Err(ApiError::invalid(message)),
            None => Ok(()),
        }
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// The check as the plugin contract gives it to a provider that checks workloads where
    /// they run (the start timeout stays the control plane's).
    pub fn to_contract(&self) -> HealthCheck {
        HealthCheck {
            path: self.path.clone(),
            interval_ms: u32::try_from(self.interval_ms).unwrap_or(u32::MAX),
            timeout_ms: u32::try_from(self.timeout_ms).unwrap_or(u32::MAX),
            healthy_threshold: self.healthy_threshold,
            unhealthy_threshold: self.unhealthy_threshold,
        }
    }
}

/// One check of the workload at `address` (`host:port`): whether `GET path` answered 2xx or
/// 3xx within the timeout.
pub async fn probe(address: &str, spec: &HealthCheckSpec) -> bool {
    tokio::time::timeout(
        Duration::from_millis(spec.timeout_ms),
        probe_once(address, &spec.path),
    )
    .await
    .unwrap_or(false)
}

/// The connection is driven here, beside the request, rather than by a task of its own: a
/// check is a future that the health loop polls among others, and costs no spawn.
async fn probe_once(address: &str, path: &str) -> bool {
    let Ok(stream) = tokio::net::TcpStream::connect(address).await else {
        return false;
    };
    let Ok((mut sender, connection)) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return false;
    };
    let request = http::Request::get(path)
        .header(http::header::HOST, address)
        .header(http::header::USER_AGENT, "bulkhead-health-check")
        .body(Empty::<bytes::Bytes>::new());
    let Ok(request) = request else {
        return false;
    };
    let response = sender.send_request(request);
    tokio::pin!(response, connection);
    // The answer's head is all a check reads; the connection ends with this function. A
    // connection that ends first (the workload answered and closed) has handed its answer, or
    // an error, to the request already.
    let response = tokio::select! {
        biased;
        response = &mut response => response,
        _ = &mut connection => response.await,
    };
    response
        .is_ok_and(|response| response.status().is_success() || response.status().is_redirection())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_check_passes_on_2xx_and_fails_otherwise() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let app = axum::Router::new()
            .route("/ok", axum::routing::get(|| async { "ok" }))
            .route(
                "/broken",
                axum::routing::get(|| async { http::StatusCode::INTERNAL_SERVER_ERROR }),
            )
            .route(
                "/slow",
                axum::routing::get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let spec = |path: &str| HealthCheckSpec {
            path: path.into(),
            timeout_ms: 300,
            ..HealthCheckSpec::default()
        };
        assert!(probe(&address, &spec("/ok")).await);
        assert!(!probe(&address, &spec("/broken")).await);
        assert!(!probe(&address, &spec("/missing")).await);
        assert!(!probe(&address, &spec("/slow")).await);
        assert!(!probe("127.0.0.1:1", &spec("/ok")).await);

        // A workload that answers and closes at once (HTTP/1.0 servers such as Python's
        // `http.server`) passes, whichever the check sees first: the answer or the close.
        let closing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closing_address = closing.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            loop {
                let (mut stream, _) = closing.accept().await.unwrap();
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request).await;
                let _ = stream
                    .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await;
            }
        });
        for _ in 0..20 {
            assert!(probe(&closing_address, &spec("/")).await);
        }
    }

    #[test]
    fn specs_are_validated() {
        assert!(HealthCheckSpec::default().validate().is_ok());
        for bad in [
            HealthCheckSpec {
                path: "health".into(),
                ..Default::default()
            },
            HealthCheckSpec {
                interval_ms: 10,
                ..Default::default()
            },
            HealthCheckSpec {
                healthy_threshold: 0,
                ..Default::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
