//! A crowd signing in through the forge when the control plane comes back, while the forge
//! limits Bulkhead's OAuth app: in the outage behind Bulkhead, the integrations' retry burst
//! got the platform rate-limited at GitHub, which blocked sign-ins for hours more.
//!
//! Before the outage, [`CROWD`] users link their forge accounts from a password session, and
//! half of them sign in through the forge. When the control plane is back and the forge limits
//! it, the other half signs in at once, each retrying after the `Retry-After` it is given (as
//! the dashboard does), while the signed-in half refreshes its sessions and reads `/v1/me`
//! every [`REFRESH_EVERY`]. Checks: the signed-in users stay signed in throughout, and every
//! new sign-in succeeds within [`SIGN_IN_LIMIT`] of the forge answering again (that nothing
//! reached the forge while it asked to wait is [`super::forge`]'s check).
//!
//! The crowd talks JSON over HTTP as a browser would, its redirects read, not followed.

use std::time::{Duration, Instant};

use bulkhead_client::Client;
use bulkhead_simulators::forge::ForgeAccount;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::fleet::user_signed_up;
use super::report::{Check, Timeline};

/// Users linked to the forge: the first half signs in before the outage, the rest after.
pub const CROWD: usize = 16;
pub const CLIENT_ID: &str = "drill-oauth-app";
pub const CLIENT_SECRET: &str = "drill-oauth-secret";
/// The provider's name in the control plane's configuration.
const PROVIDER: &str = "forge";
/// How often a signed-in user refreshes the session and reads their account.
const REFRESH_EVERY: Duration = Duration::from_millis(500);
/// How soon after the forge answers again every new sign-in must have succeeded.
const SIGN_IN_LIMIT: Duration = Duration::from_secs(10);
/// How long a member of the crowd keeps trying, in all.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// The forge's accounts, one per member of the crowd.
pub fn accounts() -> Vec<ForgeAccount> {
    (0..CROWD)
        .map(|n| ForgeAccount {
            id: 7000 + n as u64,
            login: login(n),
        })
        .collect()
}

fn login(n: usize) -> String {
    format!("crowd-{n}")
}

/// The control plane's config file: the forge (at `forge_url`) as a GitHub-like identity
/// provider. The whole crowd comes from one address (loopback), where a platform's users
/// would come from many: the limit of sign-ins per address is raised to match.
pub fn control_plane_config(forge_url: &str) -> String {
    format!(
        r#"login_rate_per_ip = 1000

[[sign_in_providers]]
name = "{PROVIDER}"
kind = "github"
authorize_url = "{forge_url}/login/oauth/authorize"
token_url = "{forge_url}/login/oauth/access_token"
userinfo_url = "{forge_url}/user"
client_id = "{CLIENT_ID}"
client_secret = "{CLIENT_SECRET}"
redirect_uri = "http://127.0.0.1:1/sign-in/{PROVIDER}"
scopes = ["read:user"]
"#
    )
}

/// A session of Bulkhead's own.
struct Session {
    access_token: String,
    refresh_token: String,
}

impl Session {
    fn from_answer(tokens: &Value) -> anyhow::Result<Self> {
        let field = |name: &str| {
            tokens[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("the session has no {name}: {tokens}"))
        };
        Ok(Self {
            access_token: field("access_token")?,
            refresh_token: field("refresh_token")?,
        })
    }
}

/// The crowd: sessions of the signed-in half, logins of the others.
pub struct SignInCrowd {
    base_url: String,
    http: reqwest::Client,
    signed_in: Vec<Session>,
    signing_in: Vec<String>,
}

/// What one answer of the control plane asks: go on with the body, or wait and try again.
enum Answer {
    Done(Value),
    Wait(Duration),
}

impl SignInCrowd {
    /// Makes the crowd's users (a password each), links each one's forge account, and signs
    /// the first half in through the forge.
    pub async fn prepare(base_url: &str, admin: &Client) -> anyhow::Result<Self> {
        let http = bulkhead_common::tls::http_client_builder(None)?
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()?;
        let mut crowd = Self {
            base_url: base_url.to_owned(),
            http,
            signed_in: Vec::new(),
            signing_in: Vec::new(),
        };
        for n in 0..CROWD {
            let email = format!("{}@drill.example", login(n));
            let password_session = user_signed_up(base_url, admin, &email, &login(n)).await?;
            crowd
                .link(&password_session.access_token, &login(n))
                .await?;
            if n < CROWD / 2 {
                let (session, _, _) = crowd.sign_in_until_done(&login(n)).await?;
                crowd.signed_in.push(session);
            } else {
                crowd.signing_in.push(login(n));
            }
        }
        Ok(crowd)
    }

    /// `POST path` with a JSON body, if any (and a bearer token): 2xx is done, 503 with
    /// `Retry-After` is a wait, anything else an error.
    async fn post(
        &self,
        path: &str,
        bearer: Option<&str>,
        body: Option<Value>,
    ) -> anyhow::Result<Answer> {
        let mut request = self.http.post(format!("{}{path}", self.base_url));
        if let Some(body) = body {
            request = request.json(&body);
        }
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        let answer = request.send().await?;
        let status = answer.status();
        if status == StatusCode::SERVICE_UNAVAILABLE
            && let Some(secs) = answer
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        {
            return Ok(Answer::Wait(Duration::from_secs(secs)));
        }
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        anyhow::ensure!(status.is_success(), "POST {path}: {status} {body}");
        Ok(Answer::Done(body))
    }

    /// The browser at the forge's authorize page as `login`: the code and state it is sent
    /// back with.
    async fn authorize(&self, start: &Value, login: &str) -> anyhow::Result<(String, String)> {
        let url = start["authorize_url"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("no authorize_url: {start}"))?;
        let answer = self.http.get(format!("{url}&login={login}")).send().await?;
        let location = answer
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                anyhow::anyhow!("the forge did not send {login} back ({})", answer.status())
            })?;
        let location = reqwest::Url::parse(location)?;
        let param = |name: &str| {
            location
                .query_pairs()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.into_owned())
                .ok_or_else(|| anyhow::anyhow!("the forge sent {login} back without {name}"))
        };
        Ok((param("code")?, param("state")?))
    }

    /// Links `login`'s forge account to the user of `access_token`, trying again after each
    /// wait the control plane asks for (its calls to the forge keep within the forge's
    /// limit: a crowd linking at once is told to wait its turn, as a browser would be).
    async fn link(&self, access_token: &str, login: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            match self.link_attempt(access_token, login).await? {
                None => return Ok(()),
                Some(wait) => {
                    anyhow::ensure!(
                        started.elapsed() < GIVE_UP_AFTER,
                        "{login} could not link its forge account within {} s",
                        GIVE_UP_AFTER.as_secs()
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// One attempt at linking: `None` when linked, or how long the control plane asked to
    /// wait.
    async fn link_attempt(
        &self,
        access_token: &str,
        login: &str,
    ) -> anyhow::Result<Option<Duration>> {
        let path = format!("/v1/me/identities/{PROVIDER}");
        let start = match self
            .post(&format!("{path}/start"), Some(access_token), None)
            .await?
        {
            Answer::Done(start) => start,
            Answer::Wait(wait) => return Ok(Some(wait)),
        };
        let (code, state) = self.authorize(&start, login).await?;
        match self
            .post(
                &format!("{path}/finish"),
                Some(access_token),
                Some(json!({ "code": code, "state": state })),
            )
            .await?
        {
            Answer::Done(_) => Ok(None),
            Answer::Wait(wait) => Ok(Some(wait)),
        }
    }

    /// One sign-in: the session, or how long the control plane asked to wait.
    async fn sign_in_attempt(&self, login: &str) -> anyhow::Result<Result<Session, Duration>> {
        let path = format!("/v1/auth/providers/{PROVIDER}");
        let start = match self.post(&format!("{path}/start"), None, None).await? {
            Answer::Done(start) => start,
            Answer::Wait(wait) => return Ok(Err(wait)),
        };
        let (code, state) = self.authorize(&start, login).await?;
        match self
            .post(
                &format!("{path}/finish"),
                None,
                Some(json!({ "code": code, "state": state })),
            )
            .await?
        {
            Answer::Done(tokens) => Ok(Ok(Session::from_answer(&tokens)?)),
            Answer::Wait(wait) => Ok(Err(wait)),
        }
    }

    /// Signs `login` in, trying again after each wait asked for: the session, when it was
    /// made, and the attempts.
    async fn sign_in_until_done(&self, login: &str) -> anyhow::Result<(Session, Instant, u32)> {
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.sign_in_attempt(login).await? {
                Ok(session) => return Ok((session, Instant::now(), attempts)),
                Err(wait) => {
                    anyhow::ensure!(
                        started.elapsed() < GIVE_UP_AFTER,
                        "{login} could not sign in within {} s ({attempts} attempts)",
                        GIVE_UP_AFTER.as_secs()
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// A signed-in user's session, refreshed and used every [`REFRESH_EVERY`] until `stop`:
    /// the refreshes and reads that worked, and those that did not.
    async fn keep_signed_in(
        &self,
        mut session: Session,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> (u32, u32) {
        let (mut worked, mut failed) = (0, 0);
        while !*stop.borrow() {
            let refreshed = self
                .post(
                    "/v1/auth/refresh",
                    None,
                    Some(json!({ "refresh_token": session.refresh_token })),
                )
                .await;
            match refreshed {
                Ok(Answer::Done(tokens)) => match Session::from_answer(&tokens) {
                    Ok(next) => {
                        session = next;
                        worked += 1;
                    }
                    Err(_) => failed += 1,
                },
                _ => failed += 1,
            }
            let me = self
                .http
                .get(format!("{}/v1/me", self.base_url))
                .bearer_auth(&session.access_token)
                .send()
                .await;
            match me {
                Ok(answer) if answer.status().is_success() => worked += 1,
                _ => failed += 1,
            }
            let _ = tokio::time::timeout(REFRESH_EVERY, stop.changed()).await;
        }
        (worked, failed)
    }

    /// The forge limits us until `lifted`: the other half signs in at once while the
    /// signed-in half keeps its sessions; answers the checks.
    pub async fn signs_in(
        &mut self,
        lifted: Instant,
        timeline: &Timeline,
    ) -> anyhow::Result<Vec<Check>> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let sessions = std::mem::take(&mut self.signed_in);
        let this = &*self;
        let keeping = futures_util::future::join_all(
            sessions
                .into_iter()
                .map(|session| this.keep_signed_in(session, stopped.clone())),
        );
        let signing_in = async {
            let outcomes = futures_util::future::join_all(
                this.signing_in
                    .iter()
                    .map(|login| this.sign_in_until_done(login)),
            )
            .await;
            let _ = stop.send(true);
            outcomes
        };
        let (kept, signed_in) = tokio::join!(keeping, signing_in);
        let signed_in = signed_in.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let (worked, failed) = kept
            .iter()
            .fold((0, 0), |(w, f), (worked, failed)| (w + worked, f + failed));
        let attempts: u32 = signed_in.iter().map(|(_, _, attempts)| attempts).sum();
        let last = signed_in
            .iter()
            .map(|(_, at, _)| *at)
            .max()
            .unwrap_or(lifted);
        let after_lifted = last.saturating_duration_since(lifted);
        timeline.note(format!(
            "{} users signed in through the forge in {attempts} attempts, the last {:.1} s after it answered again; {} signed-in users refreshed and read their accounts {worked} times, {failed} failed",
            signed_in.len(),
            after_lifted.as_secs_f64(),
            kept.len()
        ));
        Ok(vec![
            Check::new(
                "signed_in_users_stay_signed_in",
                format!(
                    "{} users signed in through the forge before the outage keep refreshing and using their sessions while it limits sign-ins",
                    kept.len()
                ),
                failed == 0 && kept.iter().all(|(worked, _)| *worked >= 2),
                format!("{worked} refreshes and reads worked, {failed} failed"),
                json!({ "users": kept.len(), "worked": worked, "failed": failed }),
            ),
            Check::new(
                "sign_ins_resume",
                format!(
                    "{} users signing in at once while the forge limits us are all signed in within {} s of it answering again",
                    self.signing_in.len(),
                    SIGN_IN_LIMIT.as_secs()
                ),
                signed_in.len() == self.signing_in.len() && after_lifted <= SIGN_IN_LIMIT,
                format!(
                    "{} signed in, {attempts} attempts, the last {:.1} s after",
                    signed_in.len(),
                    after_lifted.as_secs_f64()
                ),
                json!({ "users": signed_in.len(), "attempts": attempts, "last_after_secs": after_lifted.as_secs_f64() }),
            ),
        ])
    }
}
