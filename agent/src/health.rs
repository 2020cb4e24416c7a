//! The health probe of a workload: an HTTP `GET /` to `127.0.0.1:PORT`. Any HTTP answer, of
//! any status, counts as healthy (the process serves HTTP); no connection, no answer within the
//! timeout, or something that is not HTTP, counts as unhealthy.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one probe may take.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether something answers HTTP on `127.0.0.1:port` within `timeout`.
pub(crate) async fn probe(port: u16, timeout: Duration) -> bool {
    tokio::time::timeout(timeout, answers_http(port))
        .await
        .unwrap_or(false)
}

async fn answers_http(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: bulkhead-agent\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    // The status line starts with `HTTP/`; read until there are enough bytes to tell.
    let mut head = [0u8; 5];
    let mut filled = 0;
    while filled < head.len() {
        match stream.read(&mut head[filled..]).await {
            Ok(0) | Err(_) => return false,
            Ok(read) => filled += read,
        }
    }
    &head == b"HTTP/"
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
}
