//! Fault injection, shared by the simulators: what is wrong with the simulated cloud right
//! now. Each simulator renders the faults the way its cloud reports them.
//!
//! Admin endpoints (no authentication: the simulators listen on loopback only):
//! `GET /_sim/faults` shows the faults, `PUT /_sim/faults` replaces them with a JSON
//! [`FaultState`] (absent fields are off), `POST /_sim/recover` clears them all.

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

/// The faults of one simulator, shared by its handlers.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<FaultState>>);

impl Faults {
    pub fn now(&self) -> FaultState {
        self.0.lock().expect("not poisoned").clone()
    }

    pub fn set(&self, state: FaultState) {
        *self.0.lock().expect("not poisoned") = state;
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
