//! How the control plane checks a workload itself: an HTTP `GET` of a path on the instance's
//! own address, with a timeout, repeated at an interval, and thresholds of consecutive
//! results before the instance counts as healthy or unhealthy. A provider's API being down
//! says nothing about its workloads: only this check decides where traffic goes — made by the
//! control plane, or by the provider near the workload (a host agent) where it reports that it
//! does (see [`crate::app::deploys::health`]).

use std::time::Duration;

use http_body_util::Empty;
use hyper_util::rt::TokioIo;

use crate::app::projects::services::spec::HealthCheckSpec;

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
