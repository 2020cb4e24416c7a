//! Sign-in through an outside identity provider: OAuth 2.0's authorization code flow with
//! PKCE (S256), for OpenID Connect providers (the account is the userinfo endpoint's `sub`)
//! and GitHub's OAuth apps (the account is `GET /user`'s `id`), beside passwords.
//!
//! - **Start** ([`App::sign_in_start`]): a random `state` (stored hashed, with the sealed PKCE
//!   verifier, for ten minutes, usable once) and the provider's authorize URL to send the
//!   browser to. **Finish** ([`App::sign_in_finish`]): the state is consumed, the code
//!   exchanged at the token endpoint with the verifier, the account read at the userinfo
//!   endpoint, and the user who linked that account gets a session of Bulkhead's own — its
//!   access and refresh tokens keep working whatever the provider does afterwards.
//! - **Linking** ([`App::identity_link_finish`]): a signed-in user (a session, not an API
//!   token) runs the same flow to link an account; an account links to one user only.
//! - **Polite when the provider is not**: calls to a provider go through a token bucket
//!   ([`crate::app::shared::backpressure::Throttle`], [`CALLS_PER_SEC`] a second), at most
//!   [`IN_FLIGHT_MAX`] at once from a replica (so a crowd finishing at once reaches it a few at
//!   a time, and a limit answer stops the rest before they are sent); a 429, a 5xx, a timeout
//!   or a limit answer holds the provider for its `Retry-After` (else [`HOLD_DEFAULT`]), and
//!   while it is held new sign-ins are answered at once with 503 `sign_in_unavailable` and
//!   `Retry-After`, without calling it: a crowd retrying cannot turn into a storm at the
//!   provider. The wait is shared by the replicas, and when it is over one sign-in at a time
//!   finds out whether the provider answers again ([`crate::app::identity::sign_in::holds`]), so that a crowd
//!   that waited it out together does not reach a provider still limiting us all at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use chrono::Utc;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::identity::sessions::SessionTokens;
use crate::app::identity::sign_in::holds::Admission;
use crate::app::shared::backpressure::{Throttle, Wait};
use crate::authz::{Principal, Scope};
use crate::config::{SignInProvider, SignInProviderKind};
use crate::entity::{sign_in_state, user, user_identity};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};

/// Calls a second to one provider at most (token exchanges and account reads).
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
/// How long a started sign-in may be finished.
const STATE_TTL: chrono::Duration = chrono::Duration::minutes(10);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The client of this server's calls to identity providers.
pub struct OutsideSignIn {
    http: reqwest::Client,
    pub(crate) throttle: Throttle,
    /// Each provider's turns: [`IN_FLIGHT_MAX`] permits.
    turns: Mutex<HashMap<String, Arc<Semaphore>>>,
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
        }
    }
}

/// A configured identity provider, as listed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignInProviderView {
    pub name: String,
    pub kind: SignInProviderKind,
}

/// Where to send the browser to sign in (or link an account).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignInStart {
    /// The provider's page, with the client, the redirect, the state and the PKCE challenge.
    pub authorize_url: String,
    /// Comes back with the code; finish within `expires_at`.
    pub state: String,
    pub expires_at: chrono::DateTime<Utc>,
}

/// What the provider sent back to the redirect URI.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignInFinish {
    #[schema(min_length = 1, max_length = 512)]
    pub code: String,
    #[schema(min_length = 1, max_length = 512)]
    pub state: String,
}

/// An outside account linked to the caller.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IdentityView {
    pub id: Uuid,
    pub provider: String,
    /// The provider's id of the account.
    pub subject: String,
    /// Its login or email at the provider.
    pub login: String,
    pub created_at: chrono::DateTime<Utc>,
    pub last_used_at: Option<chrono::DateTime<Utc>>,
}

impl From<user_identity::Model> for IdentityView {
    fn from(m: user_identity::Model) -> Self {
        Self {
            id: m.id,
            provider: m.provider,
            subject: m.subject,
            login: m.login,
            created_at: m.created_at,
            last_used_at: m.last_used_at,
        }
    }
}

/// An account at a provider.
struct Account {
    subject: String,
    login: String,
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

fn refused(detail: impl Into<String>) -> AppError {
    AppError::new(ErrorCode::SignInFailed, detail)
}

fn state_hash(state: &str) -> String {
    hex::encode(Sha256::digest(state.as_bytes()))
}

fn random_url_safe() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
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

impl App {
    fn sign_in_provider(&self, name: &str) -> AppResult<&SignInProvider> {
        self.settings
            .sign_in_providers
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| AppError::not_found("sign-in provider"))
    }

    /// The configured providers.
    pub fn sign_in_providers(&self) -> Vec<SignInProviderView> {
        self.settings
            .sign_in_providers
            .iter()
            .map(|p| SignInProviderView {
                name: p.name.clone(),
                kind: p.kind,
            })
            .collect()
    }

    /// Starts a sign-in with `name` (`link_user`: linking an account to that user instead).
    pub async fn sign_in_start(
        &self,
        name: &str,
        link_user: Option<Uuid>,
    ) -> AppResult<SignInStart> {
        let provider = self.sign_in_provider(name)?;
        self.sign_in_available(name).await?;
        let state = random_url_safe();
        let verifier = random_url_safe();
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(verifier.as_bytes()));
        let expires_at = Utc::now() + STATE_TTL;
        sign_in_state::ActiveModel {
            state_hash: Set(state_hash(&state)),
            provider: Set(name.to_owned()),
            code_verifier: Set(self.secrets.seal("sign-in-verifier", &verifier)),
            link_user_id: Set(link_user),
            expires_at: Set(expires_at),
        }
        .insert(&self.db)
        .await?;
        let mut url = url::Url::parse(provider.authorize_url()).map_err(AppError::internal)?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &provider.client_id)
            .append_pair("redirect_uri", &provider.redirect_uri)
            .append_pair("state", &state)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        if !provider.scopes.is_empty() {
            url.query_pairs_mut()
                .append_pair("scope", &provider.scopes.join(" "));
        }
        Ok(SignInStart {
            authorize_url: url.to_string(),
            state,
            expires_at,
        })
    }

    /// Consumes a started sign-in of `name`: its PKCE verifier, and the user linking, if any.
    async fn sign_in_state_take(
        &self,
        name: &str,
        state: &str,
    ) -> AppResult<(String, Option<Uuid>)> {
        let hash = state_hash(state);
        let found = sign_in_state::Entity::find_by_id(hash.clone())
            .one(&self.db)
            .await?
            .filter(|found| found.provider == name && found.expires_at > Utc::now());
        let taken = sign_in_state::Entity::delete_many()
            .filter(sign_in_state::Column::StateHash.eq(hash))
            .exec(&self.db)
            .await?
            .rows_affected;
        let Some(found) = found.filter(|_| taken == 1) else {
            return Err(refused(
                "`state` is unknown, expired or used already: start the sign-in again",
            ));
        };
        let verifier = self
            .secrets
            .open_value("sign-in-verifier", &found.code_verifier)
            .map_err(|err| AppError::internal(format!("{err:#}")))?;
        Ok((verifier, found.link_user_id))
    }

    /// One call to a provider, in its turn, within its rate and outside any wait a replica
    /// recorded; an answer that means "wait" holds it for every replica, an answer to a probe
    /// ends its recovery. The turn comes first, so that calls that waited for one see a hold
    /// the calls ahead of them met.
    async fn sign_in_call(
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

    /// The account of a sign-in being finished (`link_user`: an account being linked by that
    /// user). Admitted before its state is used, so that a sign-in refused then may be sent
    /// again with the same code and state; then the state is used, the code exchanged and the
    /// account read.
    async fn sign_in_finished_account(
        &self,
        provider: &SignInProvider,
        finish: &SignInFinish,
        link_user: Option<Uuid>,
    ) -> AppResult<Account> {
        let name = provider.name.as_str();
        let mut admission = self.sign_in_admit(name).await?;
        let account = async {
            let (verifier, started_for) = self.sign_in_state_take(name, &finish.state).await?;
            if started_for != link_user {
                return Err(refused(match link_user {
                    None => "this `state` links an account: finish it at /v1/me/identities/{provider}/finish",
                    Some(_) => "this `state` was not started by you to link an account",
                }));
            }
            self.sign_in_account(provider, &finish.code, &verifier, &mut admission)
                .await
        }
        .await;
        if let Admission::Probe(lease) = admission {
            self.sign_in_probe_release(name, lease).await;
        }
        account
    }

    /// The account a code stands for: exchanged with the verifier, then read.
    async fn sign_in_account(
        &self,
        provider: &SignInProvider,
        code: &str,
        verifier: &str,
        admission: &mut Admission,
    ) -> AppResult<Account> {
        let name = provider.name.as_str();
        let exchange = self.sign_in.http.post(provider.token_url()).form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &provider.redirect_uri),
            ("client_id", &provider.client_id),
            ("client_secret", &provider.client_secret),
            ("code_verifier", verifier),
        ]);
        let answer = self
            .sign_in_call(
                name,
                exchange.header("accept", "application/json"),
                admission,
            )
            .await?;
        #[derive(Deserialize)]
        struct TokenAnswer {
            access_token: Option<String>,
            error: Option<String>,
        }
        let status = answer.status();
        let token: TokenAnswer = answer.json().await.map_err(|err| {
            refused(format!(
                "{name} answered the code exchange with no token: {err}"
            ))
        })?;
        let access_token = match (status.is_success(), token.access_token, token.error) {
            (true, Some(token), None) => token,
            (_, _, error) => {
                return Err(refused(format!(
                    "{name} refused the code ({}): start the sign-in again",
                    error.unwrap_or_else(|| status.to_string())
                )));
            }
        };
        let read = self
            .sign_in
            .http
            .get(provider.userinfo_url())
            .bearer_auth(access_token)
            .header("accept", "application/json")
            .header("user-agent", "Bulkhead");
        let answer = self.sign_in_call(name, read, admission).await?;
        if !answer.status().is_success() {
            return Err(refused(format!(
                "{name} did not show the account ({})",
                answer.status()
            )));
        }
        let info: serde_json::Value = answer
            .json()
            .await
            .map_err(|err| refused(format!("{name}'s account is not JSON: {err}")))?;
        let text = |value: &serde_json::Value| match value {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        let (subject, login) = match provider.kind {
            SignInProviderKind::Github => (text(&info["id"]), text(&info["login"])),
            SignInProviderKind::Oidc => (
                text(&info["sub"]),
                text(&info["email"]).or_else(|| text(&info["preferred_username"])),
            ),
        };
        let subject = subject
            .filter(|s| !s.is_empty() && s.len() <= 255)
            .ok_or_else(|| refused(format!("{name}'s account has no id")))?;
        Ok(Account {
            subject,
            login: login.unwrap_or_default().chars().take(255).collect(),
        })
    }

    /// Finishes a sign-in: a session for the user who linked the account.
    pub async fn sign_in_finish(
        &self,
        name: &str,
        finish: SignInFinish,
        client: std::net::IpAddr,
        request_id: &str,
    ) -> AppResult<SessionTokens> {
        let provider = self.sign_in_provider(name)?;
        let account = self
            .sign_in_finished_account(provider, &finish, None)
            .await?;
        let identity = user_identity::Entity::find()
            .filter(user_identity::Column::Provider.eq(name))
            .filter(user_identity::Column::Subject.eq(&account.subject))
            .one(&self.db)
            .await?
            .ok_or_else(|| {
                AppError::new(ErrorCode::IdentityNotLinked,
                    format!(
                        "no account here is linked to {} at {name}: sign in with your password and link it (POST /v1/me/identities/{name}/start)",
                        account.login
                    ),
                )
            })?;
        let found = user::Entity::find_by_id(identity.user_id)
            .one(&self.db)
            .await?
            .filter(|u| !u.disabled)
            .ok_or_else(|| AppError::forbidden("the linked account is disabled"))?;
        let mut used: user_identity::ActiveModel = identity.into();
        used.last_used_at = Set(Some(Utc::now()));
        used.update(&self.db).await?;
        self.session_open(found, client, request_id, name).await
    }

    /// Starts linking an account of `name` to the caller (a session's user).
    pub async fn identity_link_start(
        &self,
        principal: &Principal,
        name: &str,
    ) -> AppResult<SignInStart> {
        principal.require_session()?;
        self.sign_in_start(name, Some(principal.user.id)).await
    }

    /// Finishes linking: the account is the caller's from now on.
    pub async fn identity_link_finish(
        &self,
        principal: &Principal,
        name: &str,
        finish: SignInFinish,
    ) -> AppResult<user_identity::Model> {
        principal.require_session()?;
        let provider = self.sign_in_provider(name)?;
        let account = self
            .sign_in_finished_account(provider, &finish, Some(principal.user.id))
            .await?;
        let linked = user_identity::ActiveModel {
            id: Set(Uuid::now_v7()),
            user_id: Set(principal.user.id),
            provider: Set(name.to_owned()),
            subject: Set(account.subject),
            login: Set(account.login),
            created_at: Set(Utc::now()),
            last_used_at: Set(None),
        }
        .insert(&self.db)
        .await
        .map_err(unique_violation_as(
            ErrorCode::IdentityTaken,
            "this account at the provider is linked to a user already",
        ))?;
        Ok(linked)
    }

    pub async fn identity_list(
        &self,
        principal: &Principal,
    ) -> AppResult<Vec<user_identity::Model>> {
        principal.require_scope(Scope::Read)?;
        Ok(user_identity::Entity::find()
            .filter(user_identity::Column::UserId.eq(principal.user.id))
            .all(&self.db)
            .await?)
    }

    /// Unlinks one of the caller's accounts.
    pub async fn identity_unlink(&self, principal: &Principal, id: Uuid) -> AppResult<()> {
        principal.require_session()?;
        let removed = user_identity::Entity::delete_many()
            .filter(user_identity::Column::Id.eq(id))
            .filter(user_identity::Column::UserId.eq(principal.user.id))
            .exec(&self.db)
            .await?
            .rows_affected;
        if removed == 0 {
            return Err(AppError::not_found("identity"));
        }
        Ok(())
    }

    /// Removes the sign-ins started more than [`STATE_TTL`] ago.
    pub async fn sign_in_states_purge(&self) -> AppResult<u64> {
        Ok(sign_in_state::Entity::delete_many()
            .filter(sign_in_state::Column::ExpiresAt.lt(Utc::now()))
            .exec(&self.db)
            .await?
            .rows_affected)
    }
}
