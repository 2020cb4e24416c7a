//! Checks of a workload over HTTP on `127.0.0.1:PORT`, from the agent's side of its network:
//!
//! - [`probe`], the agent's own: `GET /`, where any HTTP answer, of any status, counts (the
//!   process serves HTTP); it tells a started process from a running one.
//! - [`check`], the platform's health check of the workload (its service's `health_check`,
//!   given with the workload): `GET path`, where only a status of 200 to 399 passes.
//!
//! No connection, no status line within the timeout, or something that is not HTTP, fails
//! both.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one probe may take.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether something answers HTTP on `127.0.0.1:port` within `timeout`.
pub(crate) async fn probe(port: u16, timeout: Duration) -> bool {
    status_within(port, "/", timeout).await.is_some()
}

/// Whether `GET path` on `127.0.0.1:port` answers a status of 200 to 399 within `timeout`.
pub(crate) async fn check(port: u16, path: &str, timeout: Duration) -> bool {
    status_within(port, path, timeout)
        .await
        .is_some_and(|status| (200..400).contains(&status))
}

async fn status_within(port: u16, path: &str, timeout: Duration) -> Option<u16> {
    tokio::time::timeout(timeout, status_of(port, path))
        .await
        .ok()
        .flatten()
}

/// The status of the answer to `GET path` (a path checked by `spec`: no spaces or control
/// characters), read from its status line.
async fn status_of(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: bulkhead-agent\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    // `HTTP/1.1 200 OK`: the status is the three digits after the first space.
    let mut head = [0u8; 12];
    let mut filled = 0;
    while filled < head.len() {
        match stream.read(&mut head[filled..]).await {
            Ok(0) | Err(_) => return None,
            Ok(read) => filled += read,
        }
    }
    if !head.starts_with(b"HTTP/") {
        return None;
    }
    let space = head.iter().position(|byte| *byte == b' ')?;
    let digits = head.get(space + 1..space + 4)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn any_http_answer_is_healthy_and_anything_else_is_not() {
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_port = http.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = http.accept().await {
                let mut buffer = [0u8; 1024];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        assert!(probe(http_port, PROBE_TIMEOUT).await);

        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_port = silent.local_addr().unwrap().port();
        let started = std::time::Instant::now();
        assert!(!probe(silent_port, Duration::from_millis(300)).await);
        assert!(started.elapsed() < Duration::from_secs(2));

        drop(silent);
        assert!(!probe(silent_port, PROBE_TIMEOUT).await);
    }

    /// A server that answers each request with the status its path names (`/204` → 204).
    async fn status_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buffer = [0u8; 1024];
                let read = socket.read(&mut buffer).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buffer[..read]).into_owned();
                let status = request
                    .split(' ')
                    .nth(1)
                    .and_then(|path| path.trim_start_matches('/').parse::<u16>().ok())
                    .unwrap_or(404);
                let answer = format!("HTTP/1.1 {status} Whatever\r\ncontent-length: 0\r\n\r\n");
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        port
    }

    #[tokio::test]
    async fn the_platform_check_passes_on_2xx_and_3xx_only() {
        let port = status_server().await;
        let timeout = Duration::from_secs(2);
        for status in [200, 204, 301, 399] {
            assert!(
                check(port, &format!("/{status}"), timeout).await,
                "{status}"
            );
        }
        for status in [100, 400, 404, 500, 503] {
            assert!(
                !check(port, &format!("/{status}"), timeout).await,
                "{status}"
            );
        }
        assert!(
            probe(port, timeout).await,
            "any answer is one for the agent's probe"
        );
    }
}
