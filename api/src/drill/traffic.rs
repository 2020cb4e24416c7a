//! The traffic the drill sends through the edge for as long as it runs: every domain in
//! turn, over HTTPS through Caddy (a new TLS connection each time, as each new visitor makes),
//! each answer recorded, so that each phase can say how many requests failed while it lasted.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where the edge serves the domains: HTTPS on `127.0.0.1:<https_port>`, with certificates
/// that chain to `root`.
#[derive(Debug, Clone)]
pub struct EdgeAddress {
    pub https_port: u16,
    pub root: PathBuf,
}

impl EdgeAddress {
    /// A client that resolves each of `domains` to the edge and trusts `root` alone; with
    /// `fresh`, a new connection for each request.
    fn client(&self, domains: &[String], fresh: bool) -> anyhow::Result<reqwest::Client> {
        let mut builder = bulkhead_common::tls::http_client_builder(Some(&self.root))?
            .timeout(Duration::from_secs(5));
        for domain in domains {
            builder = builder.resolve(domain, SocketAddr::from(([127, 0, 0, 1], self.https_port)));
        }
        if fresh {
            builder = builder.pool_max_idle_per_host(0);
        }
        Ok(builder.build()?)
    }
}

/// One request through the edge.
#[derive(Debug, Clone)]
struct Sample {
    /// Since the drill started.
    at: Duration,
    /// Which domain (its index).
    domain: usize,
    failure: Option<String>,
    /// Whether it was sent again after its connection broke before any answer.
    retried: bool,
}

/// What became of one request.
enum Outcome {
    Answered,
    /// An answer other than 200.
    Refused(String),
    /// No answer: the connection failed or broke first.
    Broken(String),
}

/// What the requests of a window came to.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TrafficFigures {
    pub requests: usize,
    pub failed: usize,
    /// Requests sent a second time because their connection broke before any answer, as
    /// browsers do for a GET (Caddy closes connections when it loads a configuration); a
    /// retried request that got its answer did not fail.
    pub retried: usize,
    /// The first few failures, as the client saw them.
    pub failures: Vec<String>,
    /// Domains answered at least once.
    pub domains_answered: usize,
}

/// Requests sent in a loop to each domain through the edge.
pub struct Traffic {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Traffic {
    /// Starts sending: each domain in turn, then a pause of `pause`.
    pub fn start(
        clock: Instant,
        edge: &EdgeAddress,
        domains: Vec<String>,
        pause: Duration,
    ) -> anyhow::Result<Self> {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (stop, mut stopped) = watch::channel(false);
        let log = samples.clone();
        // A new connection for each request, as each new visitor makes. Caddy closes its
        // connections when it loads a configuration (one per routing revision): a request
        // whose connection breaks before any answer is sent once more, as browsers do for a
        // GET, and counted as resent.
        let client = edge.client(&domains, true)?;
        let port = edge.https_port;
        let task = tokio::spawn(async move {
            while !*stopped.borrow() {
                for (index, domain) in domains.iter().enumerate() {
                    let at = clock.elapsed();
                    let (outcome, retried) = match request(&client, port, domain).await {
                        Outcome::Broken(_) => (request(&client, port, domain).await, true),
                        outcome => (outcome, false),
                    };
                    let failure = match outcome {
                        Outcome::Answered => None,
                        Outcome::Refused(failure) | Outcome::Broken(failure) => Some(failure),
                    };
                    log.lock().expect("not poisoned").push(Sample {
                        at,
                        domain: index,
                        failure,
                        retried,
                    });
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stopped.changed() => {}
                }
            }
        });
        Ok(Self {
            samples,
            stop,
            task,
        })
    }

    /// The requests sent between `from` and `to` (since the drill started).
    pub fn window(&self, from: Duration, to: Duration) -> TrafficFigures {
        let samples = self.samples.lock().expect("not poisoned");
        let mut figures = TrafficFigures::default();
        let mut answered = std::collections::BTreeSet::new();
        for sample in samples.iter().filter(|s| s.at >= from && s.at < to) {
            figures.requests += 1;
            if sample.failure.is_none() {
                answered.insert(sample.domain);
            }
            figures.retried += usize::from(sample.retried);
            if let Some(failure) = &sample.failure {
                figures.failed += 1;
                if figures.failures.len() < 5 {
                    figures
                        .failures
                        .push(format!("at {:.2} s: {failure}", sample.at.as_secs_f64()));
                }
            }
        }
        figures.domains_answered = answered.len();
        figures
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// `GET https://<domain>/` through Caddy, answered by an instance of the domain's service.
async fn request(client: &reqwest::Client, port: u16, domain: &str) -> Outcome {
    let answer = match client.get(format!("https://{domain}:{port}/")).send().await {
        Ok(answer) => answer,
        Err(err) => return Outcome::Broken(format!("{domain}: {err:#}")),
    };
    let status = answer.status();
    let body = answer.bytes().await.unwrap_or_default();
    if status != reqwest::StatusCode::OK {
        return Outcome::Refused(format!("{domain}: {status}"));
    }
    // The right service must answer: its workloads answer with their instance key, which
    // starts with the service's name (`web-1.drill.test` is served by `web-1`).
    let service = domain.split('.').next().unwrap_or_default();
    let instance = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|answer| answer["instance"].as_str().map(str::to_owned))
        .unwrap_or_default();
    if instance.starts_with(&format!("{service}-")) {
        Outcome::Answered
    } else {
        Outcome::Refused(format!(
            "{domain}: answered by `{instance}`, not by {service}"
        ))
    }
}

/// Waits until every domain answers 200 over HTTPS through Caddy (at most `limit`): the first
/// request of each makes the edge obtain its certificate.
pub async fn all_answer(
    edge: &EdgeAddress,
    domains: &[String],
    limit: Duration,
) -> anyhow::Result<()> {
    let client = edge.client(domains, false)?;
    let port = edge.https_port;
    let started = Instant::now();
    for domain in domains {
        loop {
            match request(&client, port, domain).await {
                Outcome::Answered => break,
                Outcome::Refused(failure) | Outcome::Broken(failure)
                    if started.elapsed() > limit =>
                {
                    anyhow::bail!("not answering through the edge after {limit:?}: {failure}")
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    Ok(())
}
