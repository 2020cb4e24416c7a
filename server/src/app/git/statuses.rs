//! Commit statuses: each deployment made from a push reports its state back to the forge
//! (`pending`, then `success`, `failure` or `error`, context `bulkhead/deploy`), through one
//! client that stays polite when everything retries at once.
//!
//! - **An outbox, not calls in the deploy path.** A deployment made from a push gets a row in
//!   `forge_statuses` in the same transaction ([`status_owed`]); the loop
//!   ([`App::forge_statuses_run`], on the deploy leader) sends each row's *current* state, so
//!   a backlog of changes collapses into one call per deployment and state, never a burst of
//!   every step.
//! - **The forge's limits are honoured before they are hit.** After every answer the client
//!   reads `x-ratelimit-remaining` and `x-ratelimit-reset`: at 0 remaining the installation is
//!   held until the reset, so the primary limit is never exceeded. A limit answer anyway (403
//!   or 429, GitHub's secondary limits) holds it for `Retry-After` (or the reset, or a minute,
//!   as GitHub asks).
//! - **A token bucket and a retry budget per installation** ([`crate::app::shared::backpressure::Throttle`],
//!   keyed by installation): at most [`CALLS_PER_SEC`] calls a second, and retries of failed
//!   calls (5xx, timeouts) at most a fifth of first attempts, each after capped exponential
//!   backoff with full jitter.
//! - **Only where a project's outbound calls may go** ([`crate::app::shared::outbound_addresses`]): a
//!   forge's API address is public, or in a network the operator allowed, when it is saved
//!   and at every call, whatever its name resolves to.
//! - Visible: `forge_calls_total{outcome}`, `forge_statuses_pending`, and in an installation's
//!   view (`commit_statuses.held_for_secs`).

use std::time::Duration;

use chrono::Utc;
use ipnet::IpNet;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set,
};
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::backpressure::{BACKOFF_BASE, BACKOFF_CAP, Throttle, Wait, backoff_delay};
use crate::app::shared::outbound_addresses::{CheckedResolver, address_refusal, url_check};
use crate::entity::deployment::DeploymentState;
use crate::entity::{deployment, forge_status, git_installation};
use crate::error::{AppError, AppResult};

/// Calls a second to one installation's forge at most.
pub const CALLS_PER_SEC: u32 = 5;
/// Calls in flight to forges at once.
const CONCURRENCY: usize = 4;
/// A forge call's deadline.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a limit answer without `Retry-After` or a reset holds an installation.
const LIMIT_HOLD_DEFAULT: Duration = Duration::from_secs(60);
/// The longest hold accepted from a forge's headers.
const LIMIT_HOLD_MAX: Duration = Duration::from_secs(3600);
/// How often the outbox is read without a hint.
pub const STATUSES_EVERY: Duration = Duration::from_millis(500);
/// Rows read per pass.
const BATCH: u64 = 100;
/// The context of Bulkhead's statuses on a commit.
pub const CONTEXT: &str = "bulkhead/deploy";

/// The forge client of one server: its HTTP client and the limits of each installation.
pub struct ForgeCalls {
    http: reqwest::Client,
    throttle: Throttle,
    /// The restricted networks the operator let a project's outbound calls reach.
    allowed: Vec<IpNet>,
}

impl ForgeCalls {
    /// A client that reaches only public addresses and the `allowed` networks, whatever a
    /// forge's name resolves to ([`CheckedResolver`]).
    pub fn new(allowed: &[IpNet]) -> anyhow::Result<Self> {
        Ok(Self {
            http: bulkhead_common::tls::http_client_builder(None)?
                .dns_resolver(CheckedResolver::new(allowed))
                .timeout(CALL_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
            throttle: Throttle::new(CONCURRENCY, CALLS_PER_SEC),
            allowed: allowed.to_vec(),
        })
    }
}

impl ForgeCalls {
    /// How long the forge of `installation` still holds calls back, if it does.
    pub fn held_for(&self, installation: Uuid) -> Option<Duration> {
        self.throttle.provider_held_for(&key(installation))
    }
}

fn key(installation: Uuid) -> String {
    format!("forge:{installation}")
}

/// The commit status a deployment in `state` reports, and its description.
fn status_of(deployment: &deployment::Model) -> (&'static str, String) {
    let number = deployment.number;
    match deployment.state {
        DeploymentState::Healthy => ("success", format!("deployment #{number} is healthy")),
        DeploymentState::Failed => ("failure", format!("deployment #{number} failed")),
        DeploymentState::Cancelled => ("error", format!("deployment #{number} was cancelled")),
        DeploymentState::Superseded => ("error", format!("deployment #{number} was superseded")),
        _ => (
            "pending",
            format!("deployment #{number} is {}", deployment.state),
        ),
    }
}

/// Records, in the caller's transaction, that `deployment` owes the forge of `installation`
/// its statuses (when the installation reports them).
pub(crate) async fn status_owed(
    db: &impl ConnectionTrait,
    installation: &git_installation::Model,
    deployment: &deployment::Model,
    repository: &str,
    commit: &str,
) -> AppResult<()> {
    if installation.status_api_url.is_none() {
        return Ok(());
    }
    let now = Utc::now();
    forge_status::ActiveModel {
        deployment_id: Set(deployment.id),
        installation_id: Set(installation.id),
        repository: Set(repository.to_owned()),
        commit_sha: Set(commit.to_owned()),
        sent_state: Set(None),
        done: Set(false),
        attempts: Set(0),
        next_attempt_at: Set(now),
        last_error: Set(String::new()),
        updated_at: Set(now),
    }
    .insert(db)
    .await?;
    Ok(())
}

/// What became of one call.
enum Sent {
    /// The forge took the status.
    Accepted,
    /// A limit answer: the installation is held (already recorded).
    Limited(Duration),
    /// A failure worth retrying (5xx, timeout, connection).
    Transient(String),
    /// A refusal that retrying will not change (401, 404, 422).
    Refused(String),
}

/// A limit answer's wait: `Retry-After`, else the reset, else [`LIMIT_HOLD_DEFAULT`].
fn limit_hold(headers: &reqwest::header::HeaderMap) -> Duration {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    let hold = if let Some(secs) = number("retry-after") {
        Duration::from_secs(secs.max(0) as u64)
    } else if let Some(reset) = number("x-ratelimit-reset") {
        Duration::from_secs((reset - Utc::now().timestamp()).max(1) as u64)
    } else {
        LIMIT_HOLD_DEFAULT
    };
    hold.min(LIMIT_HOLD_MAX)
}

/// Whether a 403 or 429 is a rate limit (GitHub's primary limit is a 403 with
/// `x-ratelimit-remaining: 0`; its secondary limits come with `Retry-After`).
fn limit_answer(status: u16, headers: &reqwest::header::HeaderMap) -> bool {
    status == 429
        || (status == 403
            && (headers.contains_key("retry-after")
                || headers
                    .get("x-ratelimit-remaining")
                    .is_some_and(|v| v.as_bytes() == b"0")))
}

impl App {
    /// Sends each due status whose deployment changed since its last one; returns how many
    /// calls it made.
    pub async fn forge_statuses_pass(&self) -> AppResult<usize> {
        let now = Utc::now();
        let due = forge_status::Entity::find()
            .filter(forge_status::Column::Done.eq(false))
            .filter(forge_status::Column::NextAttemptAt.lte(now))
            .order_by_asc(forge_status::Column::NextAttemptAt)
            .limit(BATCH)
            .all(&self.db)
            .await?;
        let mut calls = 0;
        for row in due {
            let Some(deployment) = deployment::Entity::find_by_id(row.deployment_id)
                .one(&self.db)
                .await?
            else {
                continue;
            };
            let (state, description) = status_of(&deployment);
            let finished = state != "pending";
            if row.sent_state.as_deref() == Some(state) {
                if finished {
                    status_update(&self.db, &row, |active| active.done = Set(true)).await?;
                }
                continue;
            }
            let retry = row.attempts > 0;
            match self.forge.throttle.admit(&key(row.installation_id), retry) {
                Ok(()) => {}
                Err(wait) => {
                    let wait = match wait {
                        Wait::ProviderHold(until) => {
                            until.saturating_duration_since(std::time::Instant::now())
                        }
                        Wait::Rate(wait) => wait,
                        Wait::RetryBudget => Duration::from_secs(1),
                    };
                    let at = Utc::now() + chrono::Duration::from_std(wait).unwrap_or_default();
                    status_update(&self.db, &row, |active| {
                        active.next_attempt_at = Set(at);
                    })
                    .await?;
                    continue;
                }
            }
            calls += 1;
            let sent = self.forge_status_send(&row, state, &description).await;
            let at = Utc::now();
            match sent {
                Sent::Accepted => {
                    metrics::counter!("forge_calls_total", "outcome" => "accepted").increment(1);
                    status_update(&self.db, &row, |active| {
                        active.sent_state = Set(Some(state.to_owned()));
                        active.done = Set(finished);
                        active.attempts = Set(0);
                        active.last_error = Set(String::new());
                        active.next_attempt_at = Set(at);
                    })
                    .await?;
                }
                Sent::Limited(hold) => {
                    metrics::counter!("forge_calls_total", "outcome" => "rate_limited")
                        .increment(1);
                    status_update(&self.db, &row, |active| {
                        active.next_attempt_at =
                            Set(at + chrono::Duration::from_std(hold).unwrap_or_default());
                        active.last_error = Set("rate limited by the forge".into());
                    })
                    .await?;
                }
                Sent::Transient(error) => {
                    metrics::counter!("forge_calls_total", "outcome" => "failed").increment(1);
                    let delay = backoff_delay(
                        row.attempts as u32,
                        BACKOFF_BASE,
                        BACKOFF_CAP,
                        &mut rand::rng(),
                    );
                    status_update(&self.db, &row, |active| {
                        active.attempts = Set(row.attempts + 1);
                        active.next_attempt_at =
                            Set(at + chrono::Duration::from_std(delay).unwrap_or_default());
                        active.last_error = Set(error);
                    })
                    .await?;
                }
                Sent::Refused(error) => {
                    metrics::counter!("forge_calls_total", "outcome" => "refused").increment(1);
                    tracing::warn!(deployment = %row.deployment_id, %error, "commit statuses: the forge refused a status; giving up on it");
                    status_update(&self.db, &row, |active| {
                        active.done = Set(true);
                        active.last_error = Set(error);
                    })
                    .await?;
                }
            }
        }
        let pending = forge_status::Entity::find()
            .filter(forge_status::Column::Done.eq(false))
            .count(&self.db)
            .await?;
        metrics::gauge!("forge_statuses_pending").set(pending as f64);
        Ok(calls)
    }

    /// One call: `POST {api}/repos/{repository}/statuses/{sha}`.
    async fn forge_status_send(
        &self,
        row: &forge_status::Model,
        state: &str,
        description: &str,
    ) -> Sent {
        let installation = match git_installation::Entity::find_by_id(row.installation_id)
            .one(&self.db)
            .await
        {
            Ok(Some(installation)) => installation,
            Ok(None) => return Sent::Refused("the installation is gone".into()),
            Err(err) => return Sent::Transient(format!("database: {err}")),
        };
        let (Some(api), Some(token)) = (&installation.status_api_url, &installation.status_token)
        else {
            return Sent::Refused("the installation reports no statuses any more".into());
        };
        let token = match self.secrets.open_value(
            &crate::app::git::installations::status_token_purpose(installation.id),
            token,
        ) {
            Ok(token) => token,
            Err(err) => return Sent::Refused(format!("the token does not open: {err:#}")),
        };
        // Checked again at each call: the operator may have narrowed the allowed networks
        // since it was saved (a name is checked as it resolves, by the client).
        if let Err(err) = url_check(&self.forge.allowed, "commit_statuses.api_url", api, 500) {
            return Sent::Refused(err.detail);
        }
        let url = format!("{api}/repos/{}/statuses/{}", row.repository, row.commit_sha);
        let answer = self
            .forge
            .http
            .post(url)
            .bearer_auth(token)
            .header("accept", "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28")
            .json(&serde_json::json!({
                "state": state,
                "context": CONTEXT,
                "description": description,
            }))
            .send()
            .await;
        let response = match answer {
            Ok(response) => response,
            Err(err) => {
                return match address_refusal(&err) {
                    Some(refused) => Sent::Refused(refused.to_string()),
                    None => Sent::Transient(format!("the forge did not answer: {err}")),
                };
            }
        };
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let forge_key = key(row.installation_id);
        if limit_answer(status, &headers) {
            let hold = limit_hold(&headers);
            self.forge.throttle.provider_hold(&forge_key, hold);
            return Sent::Limited(hold);
        }
        // The last call the window allows: nothing more until it resets.
        if headers
            .get("x-ratelimit-remaining")
            .is_some_and(|v| v.as_bytes() == b"0")
        {
            self.forge
                .throttle
                .provider_hold(&forge_key, limit_hold(&headers));
        }
        match status {
            200..=299 => Sent::Accepted,
            500..=599 | 408 => Sent::Transient(format!("the forge answered {status}")),
            _ => Sent::Refused(format!("the forge answered {status}")),
        }
    }
}

async fn status_update(
    db: &impl ConnectionTrait,
    row: &forge_status::Model,
    change: impl FnOnce(&mut forge_status::ActiveModel),
) -> AppResult<()> {
    let mut active: forge_status::ActiveModel = row.clone().into();
    change(&mut active);
    active.updated_at = Set(Utc::now());
    active.update(db).await.map_err(AppError::from)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn limit_answers_are_told_apart_from_refusals() {
        let mut primary = HeaderMap::new();
        primary.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        let reset = Utc::now().timestamp() + 30;
        primary.insert("x-ratelimit-reset", HeaderValue::from(reset));
        assert!(limit_answer(403, &primary));
        let hold = limit_hold(&primary);
        assert!((29..=31).contains(&hold.as_secs()), "{hold:?}");

        let mut secondary = HeaderMap::new();
        secondary.insert("retry-after", HeaderValue::from_static("7"));
        assert!(limit_answer(429, &secondary));
        assert!(limit_answer(403, &secondary));
        assert_eq!(limit_hold(&secondary), Duration::from_secs(7));

        // A 403 of missing permissions is a refusal, not a limit.
        let mut forbidden = HeaderMap::new();
        forbidden.insert("x-ratelimit-remaining", HeaderValue::from_static("4999"));
        assert!(!limit_answer(403, &forbidden));
        assert_eq!(limit_hold(&HeaderMap::new()), LIMIT_HOLD_DEFAULT);
        let mut huge = HeaderMap::new();
        huge.insert("retry-after", HeaderValue::from_static("999999"));
        assert_eq!(limit_hold(&huge), LIMIT_HOLD_MAX);
    }
}
