//! Fault injection, shared by the simulators: what is wrong with the simulated cloud right
//! now. Each simulator renders the faults the way its cloud reports them.
//!
//! Admin endpoints (no authentication: the simulators listen on loopback only):
//! `GET /_sim/faults` shows the faults, `PUT /_sim/faults` replaces them with a JSON
//! [`FaultState`] (absent fields are off), `POST /_sim/recover` clears them all.
//!
//! Each simulator also counts the API calls it serves ([`CallLog`], `GET /_sim/calls`,
//! `DELETE /_sim/calls` to start counting afresh): how many ran at once at most, and when each
//! started, so that tests can measure what a client's limits really did.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

/// The faults in force.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultState {
    /// The account (project) is suspended: every call fails as the cloud reports it.
    pub suspended: bool,
    /// Calls are throttled, with this `Retry-After` in seconds.
    pub rate_limited_secs: Option<u32>,
    /// Added to every call.
    pub latency_ms: u64,
    /// Calls fail with a 5xx.
    pub failing: bool,
}

/// The API calls a simulator served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallLog {
    /// Calls being served now.
    pub in_flight: u32,
    /// The most calls served at once.
    pub max_in_flight: u32,
    /// Calls served (started).
    pub total: u64,
    /// When each call started: milliseconds since the log was started, and its method and
    /// path.
    pub starts: Vec<(u64, String)>,
}

#[derive(Debug)]
struct Calls {
    log: CallLog,
    since: std::time::Instant,
}

impl Default for Calls {
    fn default() -> Self {
        Self {
            log: CallLog::default(),
            since: std::time::Instant::now(),
        }
    }
}

/// The faults of one simulator, shared by its handlers, and its call log.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<FaultState>>, Arc<Mutex<Calls>>);

impl Faults {
    pub fn now(&self) -> FaultState {
        self.0.lock().expect("not poisoned").clone()
    }

    pub fn set(&self, state: FaultState) {
        *self.0.lock().expect("not poisoned") = state;
    }

    /// The calls served since the log was last started.
    pub fn calls(&self) -> CallLog {
        self.1.lock().expect("not poisoned").log.clone()
    }

    /// Starts the call log afresh (calls in flight stay counted as in flight).
    pub fn calls_reset(&self) {
        let mut calls = self.1.lock().expect("not poisoned");
        let in_flight = calls.log.in_flight;
        *calls = Calls::default();
        calls.log.in_flight = in_flight;
        calls.log.max_in_flight = in_flight;
    }

    /// Middleware counting the API calls of a simulator (apply it to the API routes, not to
    /// the admin ones).
    pub async fn observe(
        State(faults): State<Faults>,
        request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        let what = format!("{} {}", request.method(), request.uri().path());
        {
            let mut calls = faults.1.lock().expect("not poisoned");
            let at = calls.since.elapsed().as_millis() as u64;
            calls.log.in_flight += 1;
            calls.log.max_in_flight = calls.log.max_in_flight.max(calls.log.in_flight);
            calls.log.total += 1;
            calls.log.starts.push((at, what));
        }
        let response = next.run(request).await;
        faults.1.lock().expect("not poisoned").log.in_flight -= 1;
        response
    }

    /// Sleeps for the injected latency and returns the faults to apply to this call.
    pub async fn apply(&self) -> FaultState {
        let state = self.now();
        if state.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(state.latency_ms)).await;
        }
        state
    }

    /// The admin routes, to merge into a simulator's router.
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route("/_sim/faults", get(faults_view).put(faults_set))
            .route("/_sim/recover", post(faults_recover))
            .route("/_sim/calls", get(calls_view).delete(calls_reset))
            .with_state(self.clone())
    }
}

async fn faults_view(State(faults): State<Faults>) -> Json<FaultState> {
    Json(faults.now())
}

async fn faults_set(
    State(faults): State<Faults>,
    Json(state): Json<FaultState>,
) -> Json<FaultState> {
    tracing::info!(?state, "simulator faults set");
    faults.set(state.clone());
    Json(state)
}

async fn faults_recover(State(faults): State<Faults>) -> Json<FaultState> {
    faults.set(FaultState::default());
    Json(FaultState::default())
}

async fn calls_view(State(faults): State<Faults>) -> Json<CallLog> {
    Json(faults.calls())
}

async fn calls_reset(State(faults): State<Faults>) -> Json<CallLog> {
    faults.calls_reset();
    Json(faults.calls())
}
