//! The driver of background tasks: it runs each registered task ([`TaskDefinition`]), wakes it
//! on its period, on its topics or when it asked to run again, skips it while another replica
//! leads its work, and supervises it:
//!
//! - an activation that fails or panics is logged with its cause, counted in `/metrics` and
//!   in the task's status, and tried again after a backoff (a panicked task starts again from
//!   a fresh state: whatever it held may be half-changed);
//! - a task that fails [`HANDOVER_AFTER`] times in a row gives up the lease of its work for
//!   [`HANDOVER_FOR`] when another replica is alive to take it, so that one replica's broken
//!   task does not stop that work for the whole cluster;
//! - each task's last start, duration, outcome and error are in its [`TaskStatus`], which
//!   `GET /v1/status` and `bulkhead status` show.
//!
//! What a task must not do: loop forever on its own. A task does what is due and returns; only
//! a task declared [`Schedule::Continuous`] (a listening connection, the health checks' event
//! loop) runs until the server stops, and it must return when [`Activation::stop`] turns true.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use utoipa::ToSchema;

use crate::app::App;
use crate::app::cluster::changes::Kind;
use crate::app::cluster::leases::Work;
use crate::error::{AppError, AppResult};

/// Consecutive failures after which a task gives up its work's lease.
pub const HANDOVER_AFTER: u32 = 3;
/// How long a replica stays away from the lease it gave up.
pub const HANDOVER_FOR: Duration = Duration::from_secs(15);
/// The first wait after a failure; each failure in a row doubles it.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// The longest wait after failures, unless a task says less.
const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// When a task runs.
#[derive(Debug, Clone, Copy)]
pub enum Schedule {
    /// Every `period`, sooner when woken or when an activation asks.
    Every(Duration),
    /// One activation that runs until the server stops (started again if it ends early).
    Continuous,
}

/// The lease a task needs, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseNeed {
    /// It runs on every replica.
    None,
    /// It runs only on the replica that leads this work.
    Leads(Work),
    /// It runs on every replica, and the leader of this work does more of it (the routing
    /// table: every replica serves it, the leader publishes it).
    Shares(Work),
}

impl LeaseNeed {
    fn work(self) -> Option<Work> {
        match self {
            LeaseNeed::None => None,
            LeaseNeed::Leads(work) | LeaseNeed::Shares(work) => Some(work),
        }
    }
}

/// What an activation is told.
pub struct Activation {
    /// The term of the lease this replica holds, for a task that [`LeaseNeed::Leads`].
    pub term: Option<i64>,
    /// Whether this replica took the lease since the task's last activation (a new leader
    /// looks at everything: its predecessor may have stopped half-way).
    pub leading_anew: bool,
    /// Turns true when the server stops.
    pub stop: watch::Receiver<bool>,
}

/// What an activation did that decides when the next one runs.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Run again at this time if sooner than the period (more is due, or a wait ends).
    pub again_at: Option<Instant>,
}

impl Outcome {
    /// Run again at once: there is more to do than one activation takes.
    pub fn again_now() -> Self {
        Self {
            again_at: Some(Instant::now()),
        }
    }

    /// Run again after `wait` (or at the period, if that is sooner).
    pub fn again_after(wait: Duration) -> Self {
        Self {
            again_at: Some(Instant::now() + wait),
        }
    }
}

/// A background task: a small reconciler that does what is due and says when to come back.
pub trait BackgroundTask: Send + 'static {
    /// Does what is due now.
    fn activate<'a>(
        &'a mut self,
        app: &'a App,
        activation: &'a Activation,
    ) -> BoxFuture<'a, AppResult<Outcome>>;

    /// Called once when the server stops, after the last activation.
    fn finish<'a>(&'a mut self, _app: &'a App) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Makes a task (again, after a panic: from a fresh state).
pub type TaskMaker = Box<dyn Fn() -> Box<dyn BackgroundTask> + Send + Sync>;

/// A task as registered: what it is, when it runs, and how it is made.
pub struct TaskDefinition {
    /// Short and stable: it names the task in the status and in `/metrics`.
    pub name: &'static str,
    /// What it does, for operators.
    pub description: &'static str,
    pub schedule: Schedule,
    /// Changes that wake it before its period ends.
    pub wake: &'static [Kind],
    pub lease: LeaseNeed,
    /// The longest wait after failures (shorter than [`BACKOFF_CAP`] for a task that must
    /// not stay away long, such as the leases' renewal).
    pub backoff_cap: Option<Duration>,
    pub make: TaskMaker,
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting for its next activation.
    Idle,
    Running,
    /// Another replica leads its work.
    NotLeading,
    /// Its last activation failed; it waits before the next.
    BackingOff,
    /// It gave up its work's lease after failing again and again; it waits for the lease.
    HandedOver,
    /// The server stopped it.
    Stopped,
}

/// How an activation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskOutcome {
    Ok,
    Failed,
    Panicked,
}

impl TaskOutcome {
    const fn as_str(self) -> &'static str {
        match self {
            TaskOutcome::Ok => "ok",
            TaskOutcome::Failed => "failed",
            TaskOutcome::Panicked => "panicked",
        }
    }
}

/// What an operator sees of a background task on the replica that answered.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskStatus {
    pub name: String,
    pub description: String,
    /// How often it runs unless woken sooner, in milliseconds; absent for a task that runs
    /// continuously.
    pub period_ms: Option<u64>,
    /// The work whose lease it needs, if any.
    pub lease: Option<Work>,
    pub state: TaskState,
    pub activations: u64,
    pub failures: u64,
    pub panics: u64,
    /// Failures since the last activation that succeeded.
    pub consecutive_failures: u32,
    pub last_started_at: Option<DateTime<Utc>>,
    pub last_duration_ms: Option<u64>,
    pub last_outcome: Option<TaskOutcome>,
    /// The cause of the last failure (an operator's view: internal causes included).
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    /// Until then, this replica leaves the task's lease to the others.
    pub handed_over_until: Option<DateTime<Utc>>,
}

/// A fault a test makes a task have.
#[cfg(feature = "dev")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Its next activation panics.
    PanicOnce,
    /// Every activation fails, until cleared.
    FailAlways,
}

/// The status of every task of this server.
#[derive(Default)]
pub struct TaskBoard {
    tasks: Mutex<BTreeMap<&'static str, Arc<Mutex<TaskStatus>>>>,
    #[cfg(feature = "dev")]
    faults: Mutex<BTreeMap<String, Fault>>,
}

impl TaskBoard {
    /// Every task's status, by name.
    pub fn statuses(&self) -> Vec<TaskStatus> {
        self.tasks
            .lock()
            .expect("not poisoned")
            .values()
            .map(|status| status.lock().expect("not poisoned").clone())
            .collect()
    }

    /// One task's status.
    pub fn status(&self, name: &str) -> Option<TaskStatus> {
        let tasks = self.tasks.lock().expect("not poisoned");
        Some(tasks.get(name)?.lock().expect("not poisoned").clone())
    }

    fn register(&self, definition: &TaskDefinition) -> Arc<Mutex<TaskStatus>> {
        let status = Arc::new(Mutex::new(TaskStatus {
            name: definition.name.to_owned(),
            description: definition.description.to_owned(),
            period_ms: match definition.schedule {
                Schedule::Every(period) => Some(period.as_millis() as u64),
                Schedule::Continuous => None,
            },
            lease: definition.lease.work(),
            state: TaskState::Idle,
            activations: 0,
            failures: 0,
            panics: 0,
            consecutive_failures: 0,
            last_started_at: None,
            last_duration_ms: None,
            last_outcome: None,
            last_error: None,
            last_error_at: None,
            handed_over_until: None,
        }));
        let previous = self
            .tasks
            .lock()
            .expect("not poisoned")
            .insert(definition.name, status.clone());
        assert!(
            previous.is_none(),
            "task {} registered twice",
            definition.name
        );
        status
    }

    /// Makes task `name` have `fault` (`None`: no more faults).
    #[cfg(feature = "dev")]
    pub fn fault_set(&self, name: &str, fault: Option<Fault>) {
        let mut faults = self.faults.lock().expect("not poisoned");
        match fault {
            Some(fault) => faults.insert(name.to_owned(), fault),
            None => faults.remove(name),
        };
    }

    #[cfg(feature = "dev")]
    fn fault_take(&self, name: &str) -> Option<Fault> {
        let mut faults = self.faults.lock().expect("not poisoned");
        let fault = faults.get(name).copied();
        if fault == Some(Fault::PanicOnce) {
            faults.remove(name);
        }
        fault
    }

    #[cfg(not(feature = "dev"))]
    fn fault_take(&self, _name: &str) -> Option<std::convert::Infallible> {
        None
    }
}

/// The running tasks of a server.
pub struct Driver {
    tasks: JoinSet<()>,
}

impl Driver {
    /// Starts every task of `definitions`: each is activated at once, then as it is
    /// scheduled, until `app.stopping` turns true.
    pub fn start(app: &App, definitions: Vec<TaskDefinition>) -> Self {
        let mut tasks = JoinSet::new();
        for definition in definitions {
            let status = app.tasks.register(&definition);
            tasks.spawn(supervise(app.clone(), definition, status));
        }
        Self { tasks }
    }

    /// Waits until every task has stopped (after the server began to stop).
    pub async fn join(mut self) {
        while let Some(ended) = self.tasks.join_next().await {
            if let Err(err) = ended {
                tracing::error!(error = %err, "a background task's supervisor ended abnormally");
            }
        }
    }
}

/// The wait after `failures` failures in a row (with some jitter, so that replicas whose
/// tasks failed together do not try again together).
fn backoff(failures: u32, cap: Duration) -> Duration {
    let doubled = BACKOFF_FIRST.saturating_mul(1 << failures.saturating_sub(1).min(16));
    let wait = doubled.min(cap);
    wait.mul_f64(rand::random_range(0.8..=1.0))
}

/// What a panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Waits until one of `topics` changes (forever, without topics).
async fn any_changed(topics: &mut [watch::Receiver<u64>]) {
    if topics.is_empty() {
        return std::future::pending().await;
    }
    let changes = topics.iter_mut().map(|topic| Box::pin(topic.changed()));
    let (changed, _, _) = futures_util::future::select_all(changes).await;
    if changed.is_err() {
        // The topic's sender is gone only when the server is: wait for the stop instead.
        std::future::pending::<()>().await;
    }
}

/// Waits until the database's primary changes (forever on SQLite).
async fn switched(changes: &mut Option<watch::Receiver<u64>>) {
    if let Some(changes) = changes
        && changes.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// Runs one task until the server stops.
async fn supervise(app: App, definition: TaskDefinition, status: Arc<Mutex<TaskStatus>>) {
    let name = definition.name;
    let mut stop = app.stopping.clone();
    let mut topics: Vec<watch::Receiver<u64>> = definition
        .wake
        .iter()
        .map(|kind| app.changes.topic(*kind).subscribe())
        .collect();
    let mut leases_changed = app.leases.subscribe();
    let mut database_switched = app.primary.as_ref().map(|primary| primary.subscribe());
    let period = match definition.schedule {
        Schedule::Every(period) => period,
        // A continuous task that ended is started again after a backoff, not on a period.
        Schedule::Continuous => Duration::MAX,
    };
    let cap = definition.backoff_cap.unwrap_or(BACKOFF_CAP);
    let mut task = (definition.make)();
    let mut next_at = Instant::now();
    let mut failures: u32 = 0;
    let mut handed_over_until: Option<Instant> = None;
    let mut last_term: Option<i64> = None;
    let set = |state: TaskState| status.lock().expect("not poisoned").state = state;
    loop {
        let backing_off = failures > 0;
        tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => break,
            _ = tokio::time::sleep_until(next_at) => {}
            // A failing task waits out its backoff whatever changes.
            _ = any_changed(&mut topics), if !backing_off => {}
            // A task that waits for its lease runs as soon as this replica takes it.
            _ = leases_changed.changed(), if matches!(definition.lease, LeaseNeed::Leads(_)) && !backing_off => {}
            // Failures on a database that failed over say nothing of the next attempt.
            _ = switched(&mut database_switched) => failures = 0,
        }
        for topic in &mut topics {
            topic.borrow_and_update();
        }
        leases_changed.borrow_and_update();
        if handed_over_until.is_some_and(|until| Instant::now() < until) {
            next_at = handed_over_until.expect("checked");
            continue;
        }
        if handed_over_until.take().is_some() {
            status.lock().expect("not poisoned").handed_over_until = None;
        }
        let term = match definition.lease {
            LeaseNeed::Leads(work) => match app.leases.term(work) {
                Some(term) => Some(term),
                None => {
                    set(TaskState::NotLeading);
                    last_term = None;
                    next_at = Instant::now().checked_add(period).unwrap_or(far_future());
                    continue;
                }
            },
            _ => None,
        };
        let activation = Activation {
            term,
            leading_anew: term.is_some() && term != last_term,
            stop: stop.clone(),
        };
        last_term = term;
        let started = Instant::now();
        {
            let mut status = status.lock().expect("not poisoned");
            status.state = TaskState::Running;
            status.last_started_at = Some(Utc::now());
        }
        let fault = app.tasks.fault_take(name);
        let run = async {
            #[cfg(feature = "dev")]
            match fault {
                Some(Fault::PanicOnce) => panic!("fault injected: {name} panics once"),
                Some(Fault::FailAlways) => {
                    return Err(AppError::internal(format!("fault injected: {name} fails")));
                }
                None => {}
            }
            #[cfg(not(feature = "dev"))]
            let _ = fault;
            task.activate(&app, &activation).await
        };
        let ended = AssertUnwindSafe(run).catch_unwind().await;
        let took = started.elapsed();
        metrics::histogram!("background_task_duration_seconds", "task" => name)
            .record(took.as_secs_f64());
        let (outcome, error) = match ended {
            Ok(Ok(done)) => {
                failures = 0;
                let again = Instant::now().checked_add(period).unwrap_or(far_future());
                next_at = done.again_at.map_or(again, |at| at.min(again));
                if matches!(definition.schedule, Schedule::Continuous) && !*stop.borrow() {
                    // It ended on its own: start it again, after a pause.
                    next_at = Instant::now() + backoff(1, cap);
                }
                (TaskOutcome::Ok, None)
            }
            Ok(Err(err)) => {
                failures += 1;
                tracing::warn!(task = name, failures, error = %err, "background task failed");
                (TaskOutcome::Failed, Some(err.to_string()))
            }
            Err(panic) => {
                failures += 1;
                let message = panic_message(&*panic);
                tracing::error!(task = name, failures, panic = %message, "background task panicked; it starts again from a fresh state");
                metrics::counter!("background_task_panics_total", "task" => name).increment(1);
                task = (definition.make)();
                (TaskOutcome::Panicked, Some(format!("panicked: {message}")))
            }
        };
        metrics::counter!("background_task_activations_total", "task" => name, "outcome" => outcome.as_str())
            .increment(1);
        if failures > 0 {
            next_at = Instant::now() + backoff(failures, cap);
        }
        if failures >= HANDOVER_AFTER
            && let Some(work) = definition.lease.work()
            && app.leases.leads(work)
        {
            match app.lease_hand_over(work, HANDOVER_FOR).await {
                Ok(true) => {
                    tracing::warn!(
                        task = name,
                        work = work.as_str(),
                        failures,
                        "background task keeps failing: its lease is left to another replica"
                    );
                    metrics::counter!("background_task_handovers_total", "task" => name)
                        .increment(1);
                    handed_over_until = Some(Instant::now() + HANDOVER_FOR);
                    next_at = Instant::now() + HANDOVER_FOR;
                }
                // No other replica is alive to take it: this one keeps trying.
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(task = name, error = %err, "could not hand the lease over")
                }
            }
        }
        let mut status = status.lock().expect("not poisoned");
        status.activations += 1;
        status.last_duration_ms = Some(took.as_millis() as u64);
        status.last_outcome = Some(outcome);
        status.consecutive_failures = failures;
        if let Some(error) = error {
            status.failures += 1;
            status.panics += u64::from(outcome == TaskOutcome::Panicked);
            status.last_error = Some(error);
            status.last_error_at = Some(Utc::now());
        }
        status.handed_over_until = handed_over_until
            .map(|until| Utc::now() + until.saturating_duration_since(Instant::now()));
        status.state = if handed_over_until.is_some() {
            TaskState::HandedOver
        } else if failures > 0 {
            TaskState::BackingOff
        } else {
            TaskState::Idle
        };
    }
    task.finish(&app).await;
    set(TaskState::Stopped);
}

/// A time that never comes (a period of `Duration::MAX`).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let cap = Duration::from_secs(30);
        let first = backoff(1, cap);
        assert!(
            first <= BACKOFF_FIRST && first >= BACKOFF_FIRST.mul_f64(0.8),
            "{first:?}"
        );
        let third = backoff(3, cap);
        assert!(third <= BACKOFF_FIRST * 4 && third >= (BACKOFF_FIRST * 4).mul_f64(0.8));
        assert!(backoff(40, cap) <= cap);
        assert!(backoff(40, Duration::from_millis(300)) <= Duration::from_millis(300));
    }

    #[test]
    fn a_panic_says_what_it_said() {
        let caught = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        assert_eq!(panic_message(&*caught), "boom 7");
        let caught = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(&*caught), "plain");
    }
}
