//! The API traffic the drill sends through the load balancer in front of the replicas while
//! one of them is killed: the dashboard's reads, writes and sign-ins of the drill's users,
//! each answer recorded, and each acknowledged write kept so that it can be looked for
//! afterwards. Each worker has one request in flight at a time, so at most [`WORKERS`]
//! requests can be in flight to a replica when it dies.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkhead_client::{Client, Observer};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::fleet::{Fleet, PASSWORD};
use super::records::all_pages;
use super::report::Check;

/// Workers sending requests: a reader, a writer and a signer-in.
pub const WORKERS: usize = 3;
/// The pause of the reader and the writer between requests.
const PAUSE: Duration = Duration::from_millis(50);
/// The pause between sign-ins: under the per-account and per-address login limits (each
/// user signs in every 9 s).
const LOGIN_PAUSE: Duration = Duration::from_secs(3);
/// Who signs in, in turn.
const USERS: [&str; 3] = ["ana@drill.example", "bo@drill.example", "cy@drill.example"];

/// One request through the load balancer.
#[derive(Debug, Clone)]
struct Sample {
    /// When it was sent, since the drill started.
    at: Duration,
    operation: &'static str,
    failure: Option<Failure>,
}

/// A request that failed: its HTTP status, if one came, and what the client said.
#[derive(Debug, Clone)]
struct Failure {
    status: Option<u16>,
    text: String,
}

impl<E: std::fmt::Debug> From<bulkhead_client::Error<E>> for Failure {
    fn from(err: bulkhead_client::Error<E>) -> Self {
        Failure {
            status: err.status().map(|status| status.as_u16()),
            text: err.to_string(),
        }
    }
}

/// What the requests of a window came to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ApiFigures {
    pub requests: usize,
    pub failed: usize,
    /// Failures answered 503 Service Unavailable (a replica's `not_ready`, or the balancer's
    /// while no replica is ready).
    pub unavailable: usize,
    /// Requests by operation.
    pub by_operation: BTreeMap<&'static str, usize>,
    /// The first few failures, as the client saw them.
    pub failures: Vec<String>,
}

/// What a phase's API traffic came to.
pub struct ApiOutcome {
    pub figures: ApiFigures,
    /// The environments whose creation was acknowledged.
    pub written: Vec<String>,
    /// Those of them not found afterwards.
    pub lost: Vec<String>,
}

impl ApiOutcome {
    /// The check `name` that every acknowledged write is there afterwards.
    pub fn writes_kept_check(&self, name: &'static str, expectation: &str) -> Check {
        Check::new(
            name,
            expectation,
            !self.written.is_empty() && self.lost.is_empty(),
            format!(
                "{} acknowledged, {} lost",
                self.written.len(),
                self.lost.len()
            ),
            serde_json::json!({ "acknowledged": self.written.len(), "lost": self.lost }),
        )
    }
}

/// Requests sent in a loop through the load balancer at `base_url`.
pub struct ApiTraffic {
    samples: Arc<Mutex<Vec<Sample>>>,
    /// The names of the environments whose creation was acknowledged (201), and when.
    written: Arc<Mutex<Vec<(String, Duration)>>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl ApiTraffic {
    /// Starts the workers: the owner lists the project's services and creates environments
    /// in it (`<prefix>-1`, `<prefix>-2`, …), and the three users sign in in turn.
    pub fn start(clock: Instant, base_url: &str, fleet: &Fleet, prefix: &'static str) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let written = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = watch::channel(false);
        let record = {
            let samples = samples.clone();
            move |at: Duration, operation: &'static str, failure: Option<Failure>| {
                samples.lock().expect("not poisoned").push(Sample {
                    at,
                    operation,
                    failure,
                });
            }
        };
        let project = fleet.project;
        let mut tasks = Vec::new();

        let (owner, log) = (fleet.owner.clone(), record.clone());
        tasks.push(worker(stopped.clone(), PAUSE, move |_| {
            let (owner, log) = (owner.clone(), log.clone());
            async move {
                let at = clock.elapsed();
                let answer = owner.service_list().project_id(project).send().await;
                log(at, "service_list", answer.err().map(Failure::from));
            }
        }));

        let (owner, log, acknowledged) = (fleet.owner.clone(), record.clone(), written.clone());
        tasks.push(worker(stopped.clone(), PAUSE, move |n| {
            let (owner, log, acknowledged) = (owner.clone(), log.clone(), acknowledged.clone());
            async move {
                let at = clock.elapsed();
                let name = format!("{prefix}-{n}");
                let answer = environment_create(&owner, project, &name).await;
                if answer.is_ok() {
                    acknowledged
                        .lock()
                        .expect("not poisoned")
                        .push((name, clock.elapsed()));
                }
                log(at, "environment_create", answer.err());
            }
        }));

        let (base_url, log) = (base_url.to_owned(), record);
        tasks.push(worker(stopped, LOGIN_PAUSE, move |n| {
            let (base_url, log) = (base_url.clone(), log.clone());
            async move {
                let at = clock.elapsed();
                let email = USERS[n % USERS.len()];
                let answer = Client::new(&base_url, Observer::default())
                    .session_login()
                    .body_map(|b| b.email(email).password(PASSWORD))
                    .send()
                    .await;
                log(at, "session_login", answer.err().map(Failure::from));
            }
        }));
        Self {
            samples,
            written,
            stop,
            tasks,
        }
    }

    /// The requests sent between `from` and `to` (since the drill started).
    pub fn window(&self, from: Duration, to: Duration) -> ApiFigures {
        let samples = self.samples.lock().expect("not poisoned");
        let mut figures = ApiFigures::default();
        for sample in samples.iter().filter(|s| s.at >= from && s.at < to) {
            figures.requests += 1;
            *figures.by_operation.entry(sample.operation).or_default() += 1;
            if let Some(failure) = &sample.failure {
                figures.failed += 1;
                figures.unavailable += usize::from(failure.status == Some(503));
                if figures.failures.len() < 5 {
                    figures.failures.push(format!(
                        "at {:.2} s, {}: {}",
                        sample.at.as_secs_f64(),
                        sample.operation,
                        failure.text
                    ));
                }
            }
        }
        figures
    }

    /// When the first write after `after` was acknowledged (since the drill started).
    pub fn first_write_after(&self, after: Duration) -> Option<Duration> {
        self.written
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(_, at)| *at)
            .find(|at| *at > after)
    }

    /// Stops the workers (each ends its request first) and looks for what they wrote: the
    /// requests sent between `from` and `to`, the environments whose creation was
    /// acknowledged, and those of them not found in `fleet`'s project.
    pub async fn finish(
        &mut self,
        fleet: &Fleet,
        from: Duration,
        to: Duration,
    ) -> anyhow::Result<ApiOutcome> {
        let _ = self.stop.send(true);
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
        let written: Vec<String> = {
            let written = self.written.lock().expect("not poisoned");
            written.iter().map(|(name, _)| name.clone()).collect()
        };
        let present = environment_names(&fleet.owner, fleet.project).await?;
        let lost = written
            .iter()
            .filter(|name| !present.contains(name))
            .cloned()
            .collect();
        Ok(ApiOutcome {
            figures: self.window(from, to),
            written,
            lost,
        })
    }
}

/// Calls `request(n)` for n = 1, 2, … with `pause` between, until told to stop.
fn worker<F, Fut>(mut stopped: watch::Receiver<bool>, pause: Duration, request: F) -> JoinHandle<()>
where
    F: Fn(usize) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut n = 0;
        while !*stopped.borrow() {
            n += 1;
            request(n).await;
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stopped.changed() => {}
            }
        }
    })
}

async fn environment_create(owner: &Client, project: Uuid, name: &str) -> Result<(), Failure> {
    owner
        .environment_create()
        .project_id(project)
        .body_map(|b| b.name(name))
        .send()
        .await
        .map(|_| ())
        .map_err(Failure::from)
}

/// The names of the project's environments, every page.
async fn environment_names(owner: &Client, project: Uuid) -> anyhow::Result<Vec<String>> {
    let environments = all_pages(async |cursor| {
        let mut request = owner.environment_list().project_id(project).limit(200);
        if let Some(cursor) = cursor {
            request = request.cursor(cursor);
        }
        let page = request.send().await?.into_inner();
        Ok((page.items, page.next_cursor))
    })
    .await?;
    Ok(environments.into_iter().map(|e| e.name).collect())
}
