//! Every call this server makes to an identity provider — discovery, its keys, the code
//! exchange, the account — and how they stay polite when the provider is not.
//!
//! - Calls to a provider go through a token bucket ([`Throttle`], [`CALLS_PER_SEC`] a second),
//!   at most [`IN_FLIGHT_MAX`] at once from a replica (so a crowd finishing at once reaches it
//!   a few at a time, and a limit answer stops the rest before they are sent).
//! - A 429, a 5xx, a timeout or a limit answer holds the provider for its `Retry-After` (else
//!   [`HOLD_DEFAULT`]); while it is held new sign-ins are answered at once with 503
//!   `sign_in_unavailable` and `Retry-After`, without calling it: a crowd retrying cannot turn
//!   into a storm at the provider. The wait is shared by the replicas, and when it is over one
//!   sign-in at a time finds out whether the provider answers again
//!   ([`crate::app::identity::sign_in::holds`]).
//! - [`ProviderHttp`] is the HTTP client the OAuth 2.0 and OpenID Connect libraries are given,
//!   so that their calls take the same path.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openidconnect::{AsyncHttpClient, HttpRequest, HttpResponse};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::app::App;
use crate::app::identity::sign_in::holds::Admission;
use crate::app::identity::sign_in::oidc::Discoveries;
use crate::app::shared::backpressure::{Throttle, Wait};
use crate::error::{AppError, AppResult, ErrorCode};

/// Calls a second to one provider at most (discovery, keys, code exchanges, account reads).
pub const CALLS_PER_SEC: u32 = 20;
/// Calls to one provider in flight at once from a replica, at most.
pub const IN_FLIGHT_MAX: usize = 4;
/// How long a call waits for its turn before the sign-in is answered 503 (the provider is
/// slow, and others are ahead).
const TURN_WAIT: Duration = Duration::from_secs(5);
/// How long a provider that failed without `Retry-After` is held.
const HOLD_DEFAULT: Duration = Duration::from_secs(10);
/// The longest hold taken from a provider's `Retry-After`.
const HOLD_MAX: Duration = Duration::from_secs(600);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a provider (a discovery document, a key set, a token).
const ANSWER_MAX_BYTES: usize = 1 << 20;

/// The client of this server's calls to identity providers.
pub struct OutsideSignIn {
    http: reqwest::Client,
    pub(crate) throttle: Throttle,
    /// Each provider's turns: [`IN_FLIGHT_MAX`] permits.
    turns: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// What each OpenID Provider said of itself, and its keys.
    pub(crate) discoveries: Discoveries,
}

impl OutsideSignIn {
    /// A turn to call `provider`, waited for up to [`TURN_WAIT`]; it ends when dropped.
    async fn turn(&self, provider: &str) -> AppResult<OwnedSemaphorePermit> {
        let turns = self
            .turns
            .lock()
            .expect("not poisoned")
            .entry(provider.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(IN_FLIGHT_MAX)))
            .clone();
        match tokio::time::timeout(TURN_WAIT, turns.acquire_owned()).await {
            Ok(Ok(turn)) => Ok(turn),
            _ => {
                metrics::counter!("sign_in_provider_calls_total", "outcome" => "busy").increment(1);
                Err(unavailable(provider, Duration::from_secs(1)))
            }
        }
    }
}

impl Default for OutsideSignIn {
    fn default() -> Self {
        Self {
            http: bulkhead_common::tls::http_client_builder(None)
                .expect("an HTTP client")
                .timeout(CALL_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("an HTTP client"),
            throttle: Throttle::new(64, CALLS_PER_SEC),
            turns: Mutex::default(),
            discoveries: Discoveries::default(),
        }
    }
}

pub(crate) fn unavailable(provider: &str, wait: Duration) -> AppError {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    AppError::new(ErrorCode::SignInUnavailable,
        format!(
            "signing in with {provider} is unavailable for now (it is down or limiting us); try again in {secs} s, or sign in with a password"
        ),
    )
    .retry_after(secs)
}

/// Why a provider's answer means "wait": its `Retry-After`, else the default hold.
fn hold_of(response: &reqwest::Response) -> Option<Duration> {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let limited = status == 429
        || status >= 500
        || (status == 403
            && (retry_after.is_some()
                || response
                    .headers()
                    .get("x-ratelimit-remaining")
                    .is_some_and(|v| v.as_bytes() == b"0")));
    limited.then(|| retry_after.unwrap_or(HOLD_DEFAULT).min(HOLD_MAX))
}

/// The calls of one sign-in to one provider, as an HTTP client of the `oauth2` and
/// `openidconnect` crates: each takes [`App::sign_in_call`]'s path. Its admission changes
/// as calls answer (a probe that got an answer ends the provider's recovery).
pub(crate) struct ProviderHttp<'a> {
    app: &'a App,
    provider: &'a str,
    admission: tokio::sync::Mutex<Admission>,
}

impl<'a> ProviderHttp<'a> {
    pub(crate) fn new(app: &'a App, provider: &'a str, admission: Admission) -> Self {
        Self {
            app,
            provider,
            admission: tokio::sync::Mutex::new(admission),
        }
    }

    /// The admission left after the calls made (to release a probe's lease).
    pub(crate) fn admission(self) -> Admission {
        self.admission.into_inner()
    }

    pub(crate) fn discoveries(&self) -> &'a Discoveries {
        &self.app.sign_in.discoveries
    }

    /// A call built with this server's client (for what the libraries do not call).
    pub(crate) fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.app.sign_in.http.get(url)
    }

    /// Sends `request` in the provider's turn; its answer, read whole (up to a bound).
    pub(crate) async fn send(&self, request: reqwest::RequestBuilder) -> AppResult<HttpResponse> {
        let mut admission = self.admission.lock().await;
        let response = self
            .app
            .sign_in_call(self.provider, request, &mut admission)
            .await?;
        answer_read(self.provider, response).await
    }
}

impl<'c> AsyncHttpClient<'c> for ProviderHttp<'_> {
    type Error = AppError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, AppError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let request = self
                .app
                .sign_in
                .http
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body);
            self.send(request).await
        })
    }
}

/// `response` as the libraries take it: status, headers and a body of at most
/// [`ANSWER_MAX_BYTES`].
async fn answer_read(provider: &str, mut response: reqwest::Response) -> AppResult<HttpResponse> {
    let mut answer = http::Response::builder().status(response.status());
    if let Some(headers) = answer.headers_mut() {
        *headers = std::mem::take(response.headers_mut());
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() <= ANSWER_MAX_BYTES => {
                body.extend_from_slice(&chunk);
            }
            Ok(Some(_)) => {
                return Err(AppError::new(
                    ErrorCode::SignInFailed,
                    format!(
                        "{provider} answered more than {} KiB: start the sign-in again",
                        ANSWER_MAX_BYTES / 1024
                    ),
                ));
            }
            Ok(None) => break,
            Err(err) => {
                tracing::warn!(provider, error = %err, "sign-in provider's answer cut short");
                return Err(unavailable(provider, Duration::from_secs(1)));
            }
        }
    }
    answer.body(body).map_err(AppError::internal)
}

impl App {
    /// One call to a provider, in its turn, within its rate and outside any wait a replica
    /// recorded; an answer that means "wait" holds it for every replica, an answer to a probe
    /// ends its recovery. The turn comes first, so that calls that waited for one see a hold
    /// the calls ahead of them met.
    pub(crate) async fn sign_in_call(
        &self,
        name: &str,
        request: reqwest::RequestBuilder,
        admission: &mut Admission,
    ) -> AppResult<reqwest::Response> {
        let _turn = self.sign_in.turn(name).await?;
        match self.sign_in.throttle.admit(name, false) {
            Ok(()) => {}
            Err(Wait::ProviderHold(until)) => {
                return Err(unavailable(
                    name,
                    until.saturating_duration_since(std::time::Instant::now()),
                ));
            }
            Err(Wait::Rate(wait)) => return Err(unavailable(name, wait)),
            Err(Wait::RetryBudget) => return Err(unavailable(name, Duration::from_secs(1))),
        }
        if *admission == Admission::Free {
            self.sign_in_hold_check(name).await?;
        }
        let hold = match request.send().await {
            Ok(response) => match hold_of(&response) {
                None => {
                    if let Admission::Probe(_) = admission {
                        self.sign_in_hold_clear(name).await?;
                        *admission = Admission::Free;
                        tracing::info!(provider = name, "sign-in provider answers again");
                    }
                    metrics::counter!("sign_in_provider_calls_total", "outcome" => "answered")
                        .increment(1);
                    return Ok(response);
                }
                Some(hold) => {
                    tracing::warn!(
                        provider = name,
                        status = response.status().as_u16(),
                        hold_secs = hold.as_secs(),
                        "sign-in provider limited or failed: held"
                    );
                    hold
                }
            },
            Err(err) => {
                tracing::warn!(provider = name, error = %err, "sign-in provider did not answer");
                HOLD_DEFAULT
            }
        };
        metrics::counter!("sign_in_provider_calls_total", "outcome" => "unavailable").increment(1);
        self.sign_in.throttle.provider_hold(name, hold);
        self.sign_in_hold_record(name, hold).await?;
        *admission = Admission::Free;
        Err(unavailable(name, hold))
    }
}
