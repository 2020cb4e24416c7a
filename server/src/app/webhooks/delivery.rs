//! Sending outbound webhooks, as the Standard Webhooks specification says: each message is
//! posted with `webhook-id` (the same on every attempt), `webhook-timestamp` (of the attempt)
//! and `webhook-signature` (`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the
//! endpoint's secret; during a rotation, a second signature with the previous secret).
//!
//! - **Retries on a schedule with jitter**: after a failed attempt the next waits 5 s, 5 min,
//!   30 min, 2 h, 5 h, 10 h and 10 h ([`SCHEDULE`], each ±20 %), or the endpoint's
//!   `Retry-After` if longer; after the last the message is `failed` (replay sends it again).
//! - **A breaker per endpoint**: [`BREAKER_THRESHOLD`] failed attempts in a row open it for
//!   [`BREAKER_OPEN`]; meanwhile its messages wait (no attempt is spent), then one attempt
//!   goes (half-open) and either closes it or opens it again.
//! - **Outbound address checks before each attempt** ([`crate::app::shared::outbound_addresses`]): the
//!   name is resolved here and every address must be public or in
//!   `--webhook-allowed-networks`; the request then goes to the addresses checked (no second
//!   lookup to rebind), with no redirects followed.
//!
//! The loop ([`App::webhook_deliveries_run`]) runs on the deploy leader; endpoints are served
//! concurrently, each one's messages in order.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use chrono::Utc;
use futures_util::StreamExt;
use hmac::{Hmac, Mac};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};
use sha2::Sha256;
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::outbound_addresses::{CheckedResolver, address_refusal};
use crate::app::webhooks::{secret_purpose, webhook_id};
use crate::entity::webhook_message::WebhookMessageState;
use crate::entity::{webhook_endpoint, webhook_message};
use crate::error::AppResult;

/// The waits after each failed attempt; one attempt more than waits.
pub const SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];
/// Failed attempts in a row that open an endpoint's breaker.
pub const BREAKER_THRESHOLD: i32 = 5;
/// How long an open breaker holds an endpoint's messages.
pub const BREAKER_OPEN: Duration = Duration::from_secs(60);
/// An attempt's deadline.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the due messages are read without a hint.
pub const DELIVER_EVERY: Duration = Duration::from_millis(500);
/// Messages read per pass.
const BATCH: u64 = 200;
/// Endpoints served at once.
const ENDPOINTS_AT_ONCE: usize = 8;

/// `v1,` and the signature of `body` as message `id` at `timestamp`, under `secret` (`whsec_`
/// and base64; a secret without the prefix is taken as base64 too).
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> anyhow::Result<String> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap_or(secret))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The wait after failed attempt `attempt` (1-based), jittered ±20 %; `None` after the last.
fn retry_wait(attempt: i32) -> Option<Duration> {
    let base = SCHEDULE.get(usize::try_from(attempt - 1).ok()?)?;
    Some(base.mul_f64(rand::random_range(0.8..1.2)))
}

/// What one attempt came to.
enum Attempt {
    Delivered(u16),
    /// Failed; the endpoint asked to wait this long, if it said.
    Failed {
        status: Option<u16>,
        error: String,
        retry_after: Option<Duration>,
    },
    /// The address is refused: no attempt is made, now or later.
    Refused(String),
}

impl App {
    /// One pass over the due messages; returns how many attempts it made.
    pub async fn webhook_deliveries_pass(&self) -> AppResult<usize> {
        let due = webhook_message::Entity::find()
            .filter(webhook_message::Column::State.eq(WebhookMessageState::Pending))
            .filter(webhook_message::Column::NextAttemptAt.lte(Utc::now()))
            .order_by_asc(webhook_message::Column::NextAttemptAt)
            .order_by_asc(webhook_message::Column::Id)
            .limit(BATCH)
            .all(&self.db)
            .await?;
        let mut by_endpoint: BTreeMap<Uuid, Vec<webhook_message::Model>> = BTreeMap::new();
        for message in due {
            by_endpoint
                .entry(message.endpoint_id)
                .or_default()
                .push(message);
        }
        let attempts = futures_util::stream::iter(by_endpoint)
            .map(|(endpoint, messages)| self.webhook_endpoint_serve(endpoint, messages))
            .buffer_unordered(ENDPOINTS_AT_ONCE)
            .collect::<Vec<AppResult<usize>>>()
            .await;
        attempts.into_iter().try_fold(0, |sum, n| Ok(sum + n?))
    }

    /// Sends `messages` to `endpoint_id` in order, while its breaker stays closed.
    async fn webhook_endpoint_serve(
        &self,
        endpoint_id: Uuid,
        messages: Vec<webhook_message::Model>,
    ) -> AppResult<usize> {
        let Some(mut endpoint) = webhook_endpoint::Entity::find_by_id(endpoint_id)
            .one(&self.db)
            .await?
        else {
            return Ok(0);
        };
        let mut attempts = 0;
        for message in messages {
            let now = Utc::now();
            if let Some(until) = endpoint.open_until.filter(|until| *until > now) {
                webhook_message::Entity::update_many()
                    .col_expr(webhook_message::Column::NextAttemptAt, Expr::value(until))
                    .filter(webhook_message::Column::EndpointId.eq(endpoint.id))
                    .filter(webhook_message::Column::State.eq(WebhookMessageState::Pending))
                    .filter(webhook_message::Column::NextAttemptAt.lt(until))
                    .exec(&self.db)
                    .await?;
                break;
            }
            attempts += 1;
            let attempt = self.webhook_attempt(&endpoint, &message).await;
            endpoint = self
                .webhook_attempt_record(endpoint, message, attempt)
                .await?;
        }
        Ok(attempts)
    }

    /// Records an attempt's outcome on the message and the endpoint's breaker; returns the
    /// endpoint as it now is.
    async fn webhook_attempt_record(
        &self,
        endpoint: webhook_endpoint::Model,
        message: webhook_message::Model,
        attempt: Attempt,
    ) -> AppResult<webhook_endpoint::Model> {
        let now = Utc::now();
        let attempts = message.attempts + 1;
        let mut recorded: webhook_message::ActiveModel = message.into();
        recorded.attempts = Set(attempts);
        let mut breaker: webhook_endpoint::ActiveModel = endpoint.clone().into();
        match attempt {
            Attempt::Delivered(status) => {
                metrics::counter!("webhook_attempts_total", "outcome" => "delivered").increment(1);
                recorded.state = Set(WebhookMessageState::Delivered);
                recorded.last_status = Set(Some(status.into()));
                recorded.last_error = Set(String::new());
                recorded.delivered_at = Set(Some(now));
                breaker.failures = Set(0);
                breaker.open_until = Set(None);
            }
            Attempt::Failed {
                status,
                error,
                retry_after,
            } => {
                metrics::counter!("webhook_attempts_total", "outcome" => "failed").increment(1);
                recorded.last_status = Set(status.map(i32::from));
                recorded.last_error = Set(error);
                match retry_wait(attempts) {
                    Some(wait) => {
                        let wait = retry_after.map_or(wait, |asked| asked.max(wait));
                        recorded.next_attempt_at =
                            Set(now + chrono::Duration::from_std(wait).unwrap_or_default());
                    }
                    None => recorded.state = Set(WebhookMessageState::Failed),
                }
                let failures = endpoint.failures + 1;
                breaker.failures = Set(failures);
                if failures >= BREAKER_THRESHOLD {
                    metrics::counter!("webhook_breaker_opened_total").increment(1);
                    breaker.open_until = Set(Some(
                        now + chrono::Duration::from_std(BREAKER_OPEN).unwrap_or_default(),
                    ));
                }
            }
            Attempt::Refused(error) => {
                metrics::counter!("webhook_attempts_total", "outcome" => "refused").increment(1);
                recorded.state = Set(WebhookMessageState::Failed);
                recorded.last_error = Set(error);
            }
        }
        recorded.update(&self.db).await?;
        Ok(breaker.update(&self.db).await?)
    }

    /// One attempt: the address checked, the message signed and posted.
    async fn webhook_attempt(
        &self,
        endpoint: &webhook_endpoint::Model,
        message: &webhook_message::Model,
    ) -> Attempt {
        let url = match url::Url::parse(&endpoint.url) {
            Ok(url) => url,
            Err(err) => return Attempt::Refused(format!("the URL does not parse: {err}")),
        };
        let Some(host) = url.host_str() else {
            return Attempt::Refused("the URL has no host".into());
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let resolver = CheckedResolver::new(&self.settings.webhook_allowed_networks);
        let addresses = match resolver.resolve_checked(&host).await {
            Ok(addresses) => addresses,
            Err(err) => {
                if let Some(refused) = address_refusal(err.as_ref()) {
                    return Attempt::Refused(refused.to_string());
                }
                return Attempt::Failed {
                    status: None,
                    error: format!("`{host}` does not resolve: {err}"),
                    retry_after: None,
                };
            }
        };
        let signatures = match self.webhook_signatures(endpoint, message) {
            Ok(signatures) => signatures,
            Err(err) => return Attempt::Refused(format!("the secret does not open: {err:#}")),
        };
        let client = bulkhead_common::tls::http_client_builder(None).and_then(|builder| {
            Ok(builder
                .resolve_to_addrs(&host, &addresses)
                .redirect(reqwest::redirect::Policy::none())
                .timeout(ATTEMPT_TIMEOUT)
                .build()?)
        });
        let client = match client {
            Ok(client) => client,
            Err(err) => {
                return Attempt::Failed {
                    status: None,
                    error: format!("no HTTP client: {err:#}"),
                    retry_after: None,
                };
            }
        };
        let answer = client
            .post(url)
            .header("content-type", "application/json")
            .header("user-agent", "Bulkhead-Webhooks/1")
            .header("webhook-id", webhook_id(message.id))
            .header("webhook-timestamp", signatures.0.to_string())
            .header("webhook-signature", signatures.1)
            .body(message.payload.clone())
            .send()
            .await;
        match answer {
            Ok(response) if response.status().is_success() => {
                Attempt::Delivered(response.status().as_u16())
            }
            Ok(response) => {
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|secs| Duration::from_secs(secs.min(24 * 3600)));
                Attempt::Failed {
                    status: Some(response.status().as_u16()),
                    error: format!("the endpoint answered {}", response.status()),
                    retry_after,
                }
            }
            Err(err) => Attempt::Failed {
                status: None,
                // Without the URL, which members and viewers may not see whole.
                error: format!("no answer: {}", err.without_url()),
                retry_after: None,
            },
        }
    }

    /// The timestamp and the `webhook-signature` of an attempt at `message`.
    fn webhook_signatures(
        &self,
        endpoint: &webhook_endpoint::Model,
        message: &webhook_message::Model,
    ) -> anyhow::Result<(i64, String)> {
        let timestamp = Utc::now().timestamp();
        let id = webhook_id(message.id);
        let purpose = secret_purpose(endpoint.id);
        let mut secrets = vec![self.secrets.open_value(&purpose, &endpoint.secret)?];
        if let (Some(previous), Some(until)) =
            (&endpoint.previous_secret, endpoint.previous_secret_until)
            && until > Utc::now()
        {
            secrets.push(self.secrets.open_value(&purpose, previous)?);
        }
        let signatures = secrets
            .iter()
            .map(|secret| signature(secret, &id, timestamp, message.payload.as_bytes()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok((timestamp, signatures.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's own test vector.
    #[test]
    fn signatures_match_the_specifications_test_vector() {
        assert_eq!(
            signature(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#,
            )
            .unwrap(),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        // The prefix is optional, as in the reference libraries.
        assert_eq!(
            signature(
                "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#,
            )
            .unwrap(),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn retries_follow_the_schedule_with_jitter_and_end() {
        for (attempt, base) in SCHEDULE.iter().enumerate() {
            let wait = retry_wait(attempt as i32 + 1).unwrap();
            assert!(
                wait >= base.mul_f64(0.8) && wait <= base.mul_f64(1.2),
                "{wait:?}"
            );
        }
        assert_eq!(retry_wait(SCHEDULE.len() as i32 + 1), None);
        let waits: std::collections::BTreeSet<_> = (0..20).map(|_| retry_wait(2)).collect();
        assert!(waits.len() > 10, "jittered");
    }
}
