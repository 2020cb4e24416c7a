//! A forge (GitHub's API, the part Bulkhead calls) and its webhook sender:
//!
//! - `POST /repos/{owner}/{repo}/statuses/{sha}` records a commit status, for the bearer token
//!   the simulator was made with (401 otherwise). Every answer carries GitHub's
//!   `x-ratelimit-limit`, `x-ratelimit-remaining` and `x-ratelimit-reset` (epoch seconds) of a
//!   **primary limit** of [`ForgeLimit::requests`] calls per window; a call over it is 403 with
//!   `x-ratelimit-remaining: 0`, as GitHub answers, and counted in [`ForgeStats::over_limit`].
//! - The shared [`Faults`]: `rate_limited_secs` is GitHub's **secondary limit** (429 with
//!   `Retry-After`), `failing` a 502, `latency_ms` a slow answer.
//! - GitHub's OAuth web flow, for sign-in: `GET /login/oauth/authorize` approves at once (as
//!   the account named by `login`, else the first one) and redirects with a code;
//!   `POST /login/oauth/access_token` exchanges it once, checking the client, the redirect and
//!   the PKCE verifier (S256), answering `{"error": …}` with 200 as GitHub does; `GET /user`
//!   answers the account of an access token. The same faults apply.
//! - `GET /_sim/forge` shows the [`ForgeStats`]; `PUT /_sim/forge/limit` sets the primary limit.
//! - [`push_deliver`] sends a `push` delivery to a webhook as GitHub does (signed with
//!   `X-Hub-Signature-256`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::faults::Faults;

/// The primary rate limit: `requests` calls per `window_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgeLimit {
    pub requests: u32,
    pub window_secs: u64,
}

impl Default for ForgeLimit {
    /// GitHub's limit of an installation token.
    fn default() -> Self {
        Self {
            requests: 5000,
            window_secs: 3600,
        }
    }
}

/// A commit status as received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitStatus {
    pub repository: String,
    pub sha: String,
    pub state: String,
    pub context: String,
    pub description: String,
}

/// What the forge saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ForgeStats {
    /// Statuses recorded, in order.
    pub statuses: Vec<CommitStatus>,
    /// Calls answered 403 for being over the primary limit.
    pub over_limit: u64,
    /// Calls answered 429 for the secondary limit (the `rate_limited_secs` fault).
    pub secondary_limited: u64,
    /// Calls answered 502 (the `failing` fault).
    pub failed: u64,
    /// Calls with a wrong or missing token.
    pub unauthorized: u64,
    /// Calls made while a limit answer's wait had not passed (a client that did not honour it;
    /// calls arriving within [`IN_FLIGHT`] of the answer were on their way and do not count).
    pub during_hold: u64,
    /// OAuth token exchanges and user reads answered 429 (the `rate_limited_secs` fault).
    pub oauth_limited: u64,
    /// Of those, the answers to calls made before the client could know: the first 429 after
    /// the OAuth endpoints last answered, and calls arriving within [`IN_FLIGHT`] of it. The
    /// rest came after the client had read a 429: one after each wait is polite, more is a
    /// burst.
    pub oauth_limited_first: u64,
    /// OAuth calls made while the wait of such an answer had not passed.
    pub oauth_during_hold: u64,
    /// The most OAuth calls the forge was answering at once.
    #[serde(default)]
    pub oauth_in_flight_max: u64,
}

struct Window {
    started: Instant,
    used: u32,
}

/// How long after a limit answer a call may still arrive without its client having read the
/// answer: it was on its way (a client that runs calls at once has several in flight).
const IN_FLIGHT: Duration = Duration::from_millis(100);

/// The wait a limit answer asked for.
#[derive(Clone, Copy)]
struct Hold {
    answered: Instant,
    until: Instant,
}

impl Hold {
    fn new(now: Instant, wait: Duration) -> Self {
        Self {
            answered: now,
            until: now + wait,
        }
    }

    /// Whether a call arriving `now` came while the client knew it should wait.
    fn breached_by(hold: Option<Self>, now: Instant) -> bool {
        hold.is_some_and(|hold| now >= hold.answered + IN_FLIGHT && now < hold.until)
    }
}

/// An account at the forge, for sign-in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgeAccount {
    pub id: u64,
    pub login: String,
}

/// A code handed out by the authorize step, until it is exchanged.
struct Grant {
    account: ForgeAccount,
    redirect_uri: String,
    challenge: String,
}

/// The OAuth app and its accounts.
struct OAuth {
    client_id: String,
    client_secret: String,
    accounts: Vec<ForgeAccount>,
    grants: std::collections::HashMap<String, Grant>,
    tokens: std::collections::HashMap<String, ForgeAccount>,
    /// Token exchanges and user reads answered.
    calls: u64,
    /// The wait the last 429 of these endpoints asked for.
    hold: Option<Hold>,
    /// The first 429 since these endpoints last answered (a limit under way).
    limited_since: Option<Instant>,
    /// Calls being answered now.
    in_flight: u64,
}

struct ForgeState {
    oauth: OAuth,
    token: String,
    limit: ForgeLimit,
    window: Window,
    stats: ForgeStats,
    /// The wait the last limit answer asked for.
    hold: Option<Hold>,
}

/// The forge simulator's state, shared by its handlers.
#[derive(Clone)]
pub struct ForgeSimulator {
    state: Arc<Mutex<ForgeState>>,
    pub faults: Faults,
}

impl ForgeSimulator {
    /// A forge that accepts `token`.
    pub fn new(token: &str) -> Self {
        Self {
            state: Arc::new(Mutex::new(ForgeState {
                oauth: OAuth {
                    client_id: String::new(),
                    client_secret: String::new(),
                    accounts: Vec::new(),
                    grants: Default::default(),
                    tokens: Default::default(),
                    calls: 0,
                    hold: None,
                    limited_since: None,
                    in_flight: 0,
                },
                token: token.to_owned(),
                limit: ForgeLimit::default(),
                window: Window {
                    started: Instant::now(),
                    used: 0,
                },
                stats: ForgeStats::default(),
                hold: None,
            })),
            faults: Faults::default(),
        }
    }

    /// Registers the OAuth app (`client_id`, `client_secret`) and the accounts that can sign
    /// in with it.
    pub fn oauth_app_set(&self, client_id: &str, client_secret: &str, accounts: Vec<ForgeAccount>) {
        let mut state = self.state.lock().expect("not poisoned");
        state.oauth.client_id = client_id.to_owned();
        state.oauth.client_secret = client_secret.to_owned();
        state.oauth.accounts = accounts;
    }

    /// OAuth token exchanges and user reads the forge answered (faults included).
    pub fn oauth_calls(&self) -> u64 {
        self.state.lock().expect("not poisoned").oauth.calls
    }

    pub fn stats(&self) -> ForgeStats {
        self.state.lock().expect("not poisoned").stats.clone()
    }

    /// Sets the primary limit; a new window starts.
    pub fn limit_set(&self, limit: ForgeLimit) {
        let mut state = self.state.lock().expect("not poisoned");
        state.limit = limit;
        state.window = Window {
            started: Instant::now(),
            used: 0,
        };
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/repos/{owner}/{repo}/statuses/{sha}", post(status_create))
            .route("/login/oauth/authorize", get(oauth_authorize))
            .route("/login/oauth/access_token", post(oauth_token))
            .route("/user", get(oauth_user))
            .route("/_sim/forge", get(stats_show))
            .route("/_sim/forge/limit", put(limit_put))
            .with_state(self.clone())
            .merge(self.faults.router())
    }
}

async fn stats_show(State(forge): State<ForgeSimulator>) -> Json<ForgeStats> {
    Json(forge.stats())
}

async fn limit_put(
    State(forge): State<ForgeSimulator>,
    Json(limit): Json<ForgeLimit>,
) -> StatusCode {
    forge.limit_set(limit);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct StatusBody {
    state: String,
    #[serde(default)]
    context: String,
    #[serde(default)]
    description: String,
}

fn message(status: StatusCode, text: &str) -> Response {
    (status, Json(serde_json::json!({ "message": text }))).into_response()
}

async fn status_create(
    State(forge): State<ForgeSimulator>,
    Path((owner, repo, sha)): Path<(String, String, String)>,
    headers: HeaderMap,
    Json(body): Json<StatusBody>,
) -> Response {
    let faults = forge.faults.apply().await;
    let mut state = forge.state.lock().expect("not poisoned");
    let now = Instant::now();
    if Hold::breached_by(state.hold, now) {
        state.stats.during_hold += 1;
    }
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(state.token.as_str()) {
        state.stats.unauthorized += 1;
        return message(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    if let Some(secs) = faults.rate_limited_secs {
        state.stats.secondary_limited += 1;
        state.hold = Some(Hold::new(now, Duration::from_secs(secs.into())));
        let mut response = message(
            StatusCode::TOO_MANY_REQUESTS,
            "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
        );
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from(secs));
        return response;
    }
    if faults.failing {
        state.stats.failed += 1;
        return message(StatusCode::BAD_GATEWAY, "Server Error");
    }
    let window = Duration::from_secs(state.limit.window_secs);
    if now.duration_since(state.window.started) >= window {
        state.window = Window {
            started: now,
            used: 0,
        };
    }
    let reset_in = window.saturating_sub(now.duration_since(state.window.started));
    let reset_at = chrono::Utc::now().timestamp() + reset_in.as_secs_f64().ceil() as i64;
    let over = state.window.used >= state.limit.requests;
    if over {
        state.stats.over_limit += 1;
        state.hold = Some(Hold::new(now, reset_in));
    } else {
        state.window.used += 1;
        state.stats.statuses.push(CommitStatus {
            repository: format!("{owner}/{repo}"),
            sha,
            state: body.state.clone(),
            context: body.context.clone(),
            description: body.description.clone(),
        });
    }
    let remaining = state.limit.requests.saturating_sub(state.window.used);
    let mut response = if over {
        message(
            StatusCode::FORBIDDEN,
            "API rate limit exceeded for installation.",
        )
    } else {
        (
            StatusCode::CREATED,
            Json(serde_json::json!({ "state": body.state, "context": body.context })),
        )
            .into_response()
    };
    let headers = response.headers_mut();
    headers.insert("x-ratelimit-limit", HeaderValue::from(state.limit.requests));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(remaining));
    headers.insert("x-ratelimit-reset", HeaderValue::from(reset_at));
    response
}

#[derive(Deserialize)]
struct AuthorizeQuery {
    client_id: String,
    redirect_uri: String,
    state: String,
    code_challenge: String,
    code_challenge_method: String,
    login: Option<String>,
}

async fn oauth_authorize(
    State(forge): State<ForgeSimulator>,
    axum::extract::Query(query): axum::extract::Query<AuthorizeQuery>,
) -> Response {
    let mut state = forge.state.lock().expect("not poisoned");
    if query.client_id != state.oauth.client_id || query.code_challenge_method != "S256" {
        return message(
            StatusCode::BAD_REQUEST,
            "unknown client or no S256 challenge",
        );
    }
    let account = match &query.login {
        Some(login) => state.oauth.accounts.iter().find(|a| &a.login == login),
        None => state.oauth.accounts.first(),
    };
    let Some(account) = account.cloned() else {
        return message(StatusCode::NOT_FOUND, "no such account");
    };
    let code = format!("code-{}", uuid::Uuid::new_v4().simple());
    state.oauth.grants.insert(
        code.clone(),
        Grant {
            account,
            redirect_uri: query.redirect_uri.clone(),
            challenge: query.code_challenge,
        },
    );
    let separator = if query.redirect_uri.contains('?') {
        '&'
    } else {
        '?'
    };
    let location = format!(
        "{}{separator}code={code}&state={}",
        query.redirect_uri,
        form_urlencoded::byte_serialize(query.state.as_bytes()).collect::<String>()
    );
    (StatusCode::FOUND, [("location", location)]).into_response()
}

/// An OAuth call being answered (its fault's latency), counted in
/// [`ForgeStats::oauth_in_flight_max`] until dropped, also when the caller gives up.
struct OAuthAnswering<'a>(&'a ForgeSimulator);

impl<'a> OAuthAnswering<'a> {
    fn new(forge: &'a ForgeSimulator) -> Self {
        let mut state = forge.state.lock().expect("not poisoned");
        state.oauth.in_flight += 1;
        state.stats.oauth_in_flight_max =
            state.stats.oauth_in_flight_max.max(state.oauth.in_flight);
        Self(forge)
    }
}

impl Drop for OAuthAnswering<'_> {
    fn drop(&mut self) {
        self.0.state.lock().expect("not poisoned").oauth.in_flight -= 1;
    }
}

/// A fault answer of the OAuth endpoints, if one is set. Their secondary limit is the OAuth
/// app's own, apart from the commit statuses' installation.
async fn oauth_fault(forge: &ForgeSimulator) -> Option<Response> {
    let faults = {
        let _answering = OAuthAnswering::new(forge);
        forge.faults.apply().await
    };
    let mut state = forge.state.lock().expect("not poisoned");
    let now = Instant::now();
    state.oauth.calls += 1;
    if Hold::breached_by(state.oauth.hold, now) {
        state.stats.oauth_during_hold += 1;
    }
    if let Some(secs) = faults.rate_limited_secs {
        state.stats.oauth_limited += 1;
        let since = *state.oauth.limited_since.get_or_insert(now);
        if now < since + IN_FLIGHT {
            state.stats.oauth_limited_first += 1;
        }
        state.oauth.hold = Some(Hold::new(now, Duration::from_secs(secs.into())));
        let mut response = message(
            StatusCode::TOO_MANY_REQUESTS,
            "You have exceeded a secondary rate limit.",
        );
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from(secs));
        return Some(response);
    }
    if faults.failing {
        return Some(message(StatusCode::BAD_GATEWAY, "Server Error"));
    }
    state.oauth.limited_since = None;
    None
}

async fn oauth_token(
    State(forge): State<ForgeSimulator>,
    axum::extract::Form(form): axum::extract::Form<std::collections::HashMap<String, String>>,
) -> Response {
    if let Some(fault) = oauth_fault(&forge).await {
        return fault;
    }
    let mut state = forge.state.lock().expect("not poisoned");
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    let error = |code: &str| Json(serde_json::json!({ "error": code })).into_response();
    if field("client_id") != state.oauth.client_id
        || field("client_secret") != state.oauth.client_secret
    {
        return error("incorrect_client_credentials");
    }
    let Some(grant) = state.oauth.grants.remove(&field("code")) else {
        return error("bad_verification_code");
    };
    use sha2::Digest;
    let challenge = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        sha2::Sha256::digest(field("code_verifier").as_bytes()),
    );
    if challenge != grant.challenge || field("redirect_uri") != grant.redirect_uri {
        return error("bad_verification_code");
    }
    let token = format!("gho_{}", uuid::Uuid::new_v4().simple());
    state.oauth.tokens.insert(token.clone(), grant.account);
    Json(serde_json::json!({ "access_token": token, "token_type": "bearer", "scope": "read:user" }))
        .into_response()
}

async fn oauth_user(State(forge): State<ForgeSimulator>, headers: HeaderMap) -> Response {
    if let Some(fault) = oauth_fault(&forge).await {
        return fault;
    }
    let state = forge.state.lock().expect("not poisoned");
    let account = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("token "))
        })
        .and_then(|token| state.oauth.tokens.get(token));
    match account {
        Some(account) => {
            Json(serde_json::json!({ "id": account.id, "login": account.login })).into_response()
        }
        None => message(StatusCode::UNAUTHORIZED, "Bad credentials"),
    }
}

/// The `X-Hub-Signature-256` of `body` under `secret`, as GitHub computes it.
pub fn hub_signature(secret: &str, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// The JSON of a `push` of `commit` to `branch` of `repository`, pushed at `pushed_at`
/// (epoch seconds).
pub fn push_event(repository: &str, branch: &str, commit: &str, pushed_at: i64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "ref": format!("refs/heads/{branch}"),
        "before": "0".repeat(40),
        "after": commit,
        "repository": { "full_name": repository, "pushed_at": pushed_at },
        "pusher": { "name": "forge-simulator" },
        "head_commit": { "id": commit, "message": format!("commit {commit}") },
        "commits": [],
    }))
    .expect("JSON")
}

/// Sends `body` as delivery `id` of a `push` event to the webhook at `url`, signed with
/// `secret`; the status of the answer.
pub async fn push_deliver(
    http: &reqwest::Client,
    url: &str,
    secret: &str,
    id: &str,
    body: Vec<u8>,
) -> reqwest::Result<u16> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", id)
        .header("x-hub-signature-256", hub_signature(secret, &body))
        .body(body)
        .send()
        .await?;
    Ok(response.status().as_u16())
}
