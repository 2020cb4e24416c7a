//! Simulated instances are real: each one serves HTTP on its own loopback address (Linux
//! routes all of 127.0.0.0/8 to the loopback interface), on the port its workload asked for,
//! answering every request with its id, with status 200 until a test makes it answer another
//! ([`InstanceServer::answer_with`]: a sick instance, for health checks). So an instance's
//! address looks like a cloud's (`ip:port`, the port the workload listens on), and routing and
//! health checks reach it.
//!
//! Instances print, as a workload does ([`Output`]): `listening on IP:PORT` to stdout when
//! they start, and one access-log line `METHOD PATH STATUS` per request they serve (to stdout,
//! to stderr when the status is 500 or more). A test adds lines with
//! [`InstanceServer::print`]. The simulators serve what was printed through their cloud's
//! logging API; the output outlives the instance's server, as a cloud's logs outlive the VM.
//!
//! A process walks the addresses from a random start: simulators in several processes on one
//! machine (tests run side by side) would otherwise all start at the same address, and one
//! process's new instance would take an address another's deleted instance had — where that
//! other's edge may still send the deleted instance's traffic. (The drill saw exactly that:
//! `web-2.drill.test` answered by another drill's `web-1`.) Clouds recycle addresses too, but
//! far more slowly than these tests do.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::SystemTime;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How many loopback addresses instances take from: 127.100.0.1 .. 127.255.255.254, clear of
/// 127.0.0.1 and its neighbours.
const ADDRESSES: u32 = 155 << 16;

/// The next address to try, as an offset from 127.100.0.1 (process-wide, so that two
/// simulators of one process never share one), starting at a random offset.
static NEXT: LazyLock<AtomicU32> = LazyLock::new(|| {
    let mut start = [0; 4];
    getrandom::fill(&mut start).expect("the system's random numbers");
    AtomicU32::new(u32::from_le_bytes(start) % ADDRESSES)
});

/// How many lines of an instance's output are kept (the oldest are dropped first).
pub const OUTPUT_LINES: usize = 10_000;

/// Where a line an instance printed went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    /// `stdout` / `stderr`: how the simulated clouds name the stream.
    pub fn name(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// One line an instance printed, without its line ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    /// Its place in the instance's output: 1 for the first line ever printed, and so on (kept
    /// when older lines are dropped).
    pub seq: u64,
    /// When it was printed.
    pub time: SystemTime,
    pub stream: OutputStream,
    pub text: String,
}

/// What an instance printed: the last [`OUTPUT_LINES`] lines, oldest first. Cloning shares it,
/// so a simulator keeps an instance's output readable once the instance is gone (as a cloud's
/// logging service keeps it).
#[derive(Debug, Clone, Default)]
pub struct Output(Arc<Mutex<OutputBuffer>>);

#[derive(Debug, Default)]
struct OutputBuffer {
    lines: VecDeque<OutputLine>,
    printed: u64,
}

impl Output {
    /// Appends a line printed now.
    pub fn print(&self, stream: OutputStream, text: &str) {
        self.print_at(SystemTime::now(), stream, text);
    }

    /// Appends a line printed at `time` (tests: lines that share a timestamp). A line with an
    /// earlier time than the last one's is kept in printing order; readers order by time.
    pub fn print_at(&self, time: SystemTime, stream: OutputStream, text: &str) {
        let mut buffer = self.0.lock().expect("not poisoned");
        buffer.printed += 1;
        let seq = buffer.printed;
        if buffer.lines.len() == OUTPUT_LINES {
            buffer.lines.pop_front();
        }
        buffer.lines.push_back(OutputLine {
            seq,
            time,
            stream,
            text: text.to_owned(),
        });
    }

    /// The lines kept, oldest first.
    pub fn lines(&self) -> Vec<OutputLine> {
        self.0
            .lock()
            .expect("not poisoned")
            .lines
            .iter()
            .cloned()
            .collect()
    }

    /// The texts of the lines kept on `stream`, oldest first (for assertions).
    pub fn texts(&self, stream: OutputStream) -> Vec<String> {
        self.0
            .lock()
            .expect("not poisoned")
            .lines
            .iter()
            .filter(|line| line.stream == stream)
            .map(|line| line.text.clone())
            .collect()
    }

    /// How many lines were printed in all, including those dropped.
    pub fn printed(&self) -> u64 {
        self.0.lock().expect("not poisoned").printed
    }
}

/// A running simulated instance.
pub struct InstanceServer {
    pub addr: SocketAddr,
    /// The status it answers every request with.
    status: Arc<AtomicU16>,
    output: Output,
    task: JoinHandle<()>,
}

impl InstanceServer {
    /// Starts an instance answering `id` on a fresh loopback address at `port` (0: any).
    pub async fn start(id: &str, port: u16) -> std::io::Result<Self> {
        let listener = loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 100, 0, 1)) + n % ADDRESSES);
            match TcpListener::bind((ip, port)).await {
                Ok(listener) => break listener,
                Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(err) => return Err(err),
            }
        };
        let addr = listener.local_addr()?;
        let body = format!("{{\"instance\":\"{id}\"}}\n");
        let status = Arc::new(AtomicU16::new(200));
        let answers = status.clone();
        let output = Output::default();
        output.print(OutputStream::Stdout, &format!("listening on {addr}"));
        let router = Router::new()
            .fallback(get(move || {
                let body = body.clone();
                let status = StatusCode::from_u16(answers.load(Ordering::Relaxed))
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                async move { (status, [("content-type", "application/json")], body) }
            }))
            .layer(axum::middleware::from_fn_with_state(
                output.clone(),
                access_log,
            ));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            addr,
            status,
            output,
            task,
        })
    }

    /// Prints `text` as the workload would, on `stream`.
    pub fn print(&self, stream: OutputStream, text: &str) {
        self.output.print(stream, text);
    }

    /// What it printed (a shared handle: it stays readable once the server is gone).
    pub fn output(&self) -> &Output {
        &self.output
    }

    /// Answers every request from now on with `status` (200 again: healthy again).
    pub fn answer_with(&self, status: StatusCode) {
        self.status.store(status.as_u16(), Ordering::Relaxed);
    }
}

/// Prints `METHOD PATH STATUS` for each request served: to stderr for a 5xx, else to stdout.
async fn access_log(State(output): State<Output>, request: Request, next: Next) -> Response {
    let line = format!("{} {}", request.method(), request.uri().path());
    let response = next.run(request).await;
    let status = response.status();
    let stream = if status.is_server_error() {
        OutputStream::Stderr
    } else {
        OutputStream::Stdout
    };
    output.print(stream, &format!("{line} {}", status.as_u16()));
    response
}

impl Drop for InstanceServer {
    /// Deleting an instance stops its server.
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_instance_prints_its_address_and_each_request_it_serves() {
        let instance = InstanceServer::start("web-1", 0).await.unwrap();
        let output = instance.output().clone();
        let http = crate::test_http();
        let url = format!("http://{}", instance.addr);
        http.get(format!("{url}/health?x=1")).send().await.unwrap();
        instance.answer_with(StatusCode::SERVICE_UNAVAILABLE);
        http.get(format!("{url}/")).send().await.unwrap();
        http.post(format!("{url}/form")).send().await.unwrap();
        instance.print(OutputStream::Stderr, "boom");

        assert_eq!(
            output.texts(OutputStream::Stdout),
            [
                format!("listening on {}", instance.addr),
                "GET /health 200".to_owned(),
                "POST /form 405".to_owned(),
            ]
        );
        assert_eq!(output.texts(OutputStream::Stderr), ["GET / 503", "boom"]);
        let lines = output.lines();
        let seqs: Vec<u64> = lines.iter().map(|line| line.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
        assert!(lines.windows(2).all(|pair| pair[0].time <= pair[1].time));

        // The output outlives the server.
        drop(instance);
        assert_eq!(output.printed(), 5);
    }

    #[test]
    fn the_output_keeps_the_newest_lines() {
        let output = Output::default();
        for n in 0..OUTPUT_LINES + 5 {
            output.print(OutputStream::Stdout, &n.to_string());
        }
        let lines = output.lines();
        assert_eq!(lines.len(), OUTPUT_LINES);
        assert_eq!(lines[0].text, "5");
        assert_eq!(lines[0].seq, 6);
        assert_eq!(output.printed(), (OUTPUT_LINES + 5) as u64);
    }
}
