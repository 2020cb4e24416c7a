//! The GCP Compute Engine simulator: Google's OAuth 2.0 token endpoint (the service-account
//! JWT-bearer grant) and the subset of the Compute Engine v1 API that the `gcp` plugin uses,
//! checking what Google checks and answering in Google's shapes.
//!
//! Routes, under [`GcpSimulator::url`]:
//!
//! - `POST /token` (form `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=JWT`):
//!   the assertion must be RS256-signed with the service account's key, `iss` its
//!   `client_email`, `aud` this endpoint's URL ([`GcpSimulator::token_url`], or the same path
//!   on the `Host` the request was sent to), `iat`/`exp` at most an hour apart and current
//!   (five minutes of leeway), `scope` non-empty Google scopes. The answer is a `ya29.` access
//!   token valid for an hour; refusals are 400 `{"error":"invalid_grant",...}` as Google words
//!   them.
//! - The Compute API, `Authorization: Bearer ya29...` required (missing, unknown or expired →
//!   401 `UNAUTHENTICATED`). As at Google, the scope is checked by the API, not at the token
//!   endpoint: `compute` or `cloud-platform` may do anything, `compute.readonly` or
//!   `cloud-platform.read-only` only read; otherwise 403 `insufficientPermissions`.
//!   - `GET  /compute/v1/projects/{project}/zones/{zone}`: the zone.
//!   - `POST /compute/v1/projects/{project}/zones/{zone}/instances[?requestId=UUID]`: insert
//!     (name, machine type, boot disk, labels and metadata validated as Google does; an
//!     existing name → 409 `alreadyExists`; a repeated `requestId` returns the first
//!     operation). Operations are `DONE` at once.
//!   - `GET|DELETE /compute/v1/projects/{project}/zones/{zone}/instances/{name}`.
//!   - `GET  /compute/v1/projects/{project}/zones/{zone}/operations/{operation}`.
//!   - `GET  /compute/v1/projects/{project}/aggregated/instances[?filter=&maxResults=&pageToken=]`:
//!     the filter may be `labels.KEY=VALUE` or `name=VALUE` (spaces and quotes allowed);
//!     zones without instances appear with Google's `NO_RESULTS_ON_PAGE` warning.
//!
//!   Another project than the simulator's → 404; zones are any name shaped like a GCP zone
//!   (`us-central1-a`), others → 404.
//! - Cloud Logging, `POST /v2/entries:list` ([`logging`]): what the instances printed, one
//!   entry per line (`projects/P/logs/stdout` or `.../stderr`, resource `gce_instance`), with
//!   the filter subset, ordering and paging the plugin uses. The token must carry a logging
//!   scope (`logging.read`, `logging.admin`, or a `cloud-platform` one); errors are in Google's
//!   newer shape (`status` and `ErrorInfo` details).
//!
//! Instances are real ([`crate::instances`]): each serves HTTP on its own loopback address, on
//! the port of its metadata item `bulkhead-port` (default 8080), and that address is its
//! `networkIP`. Deleting an instance stops its server. [`GcpSimulator::terminate`] stops one
//! as if it crashed (status `TERMINATED`). What an instance prints is kept after it is deleted
//! (as Cloud Logging keeps it): [`GcpSimulator::instance_output`] reads it and adds lines.
//!
//! Faults ([`crate::faults`]), rendered as Google does; the token endpoint and the API are
//! both affected, consistently:
//!
//! | fault | token endpoint | Compute API |
//! | --- | --- | --- |
//! | `latency_ms` | delayed | delayed |
//! | `failing` | 503 `{"error":"internal_failure"}` | 503 `backendError`, `UNAVAILABLE` |
//! | `rate_limited_secs` | 429 `{"error":"rate_limit_exceeded"}` + `Retry-After` | 429 `rateLimitExceeded`, `RESOURCE_EXHAUSTED` + `Retry-After` |
//! | `suspended` | 400 `{"error":"invalid_grant","error_description":"Account disabled"}` (no new tokens) | 403 `projectSuspended`, `PERMISSION_DENIED` ("Project P cannot accept requests while it is suspended.") for tokens issued before |
//!
//! Cloud Logging renders the same faults in its own words: 503 `UNAVAILABLE`, 429
//! `RESOURCE_EXHAUSTED` (reason `RATE_LIMIT_EXCEEDED`, `Retry-After`), and for a suspended
//! project 403 `PERMISSION_DENIED` with reason `CONSUMER_SUSPENDED` ("Permission denied:
//! Consumer 'projects/P' has been suspended.").
//!
//! The billing-disabled variants (`accountDisabled`, `billingDisabled`) are not simulated: one
//! `suspended` fault maps to `projectSuspended`. The plugin understands all three.

mod logging;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use rsa::pkcs8::{DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::sha2::Sha256;
use serde_json::{Value, json};

use crate::RunningSimulator;
use crate::faults::Faults;
use crate::instances::{InstanceServer, Output, OutputStream};

pub use logging::LOGGING_READ_SCOPE;

/// The OAuth scope of the Compute Engine API.
pub const COMPUTE_SCOPE: &str = "https://www.googleapis.com/auth/compute";
const COMPUTE_READONLY_SCOPE: &str = "https://www.googleapis.com/auth/compute.readonly";
const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
const CLOUD_PLATFORM_READONLY_SCOPE: &str =
    "https://www.googleapis.com/auth/cloud-platform.read-only";
/// The grant type of a service account's signed assertion (RFC 7523).
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// How long an access token lives, as at Google.
const TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Clock skew tolerated on `iat` and `exp`.
const LEEWAY_SECS: i64 = 300;
/// The port of an instance whose metadata does not say.
const DEFAULT_PORT: u16 = 8080;
/// Zones listed (with a "no results" warning) in aggregated lists even without instances.
const LISTED_ZONES: &[&str] = &["us-central1-a", "us-central1-b", "europe-west1-b"];

/// A service account as the simulator knows it: its email and the public half of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccount {
    pub client_email: String,
    /// SPKI PEM (`-----BEGIN PUBLIC KEY-----`).
    pub public_key_pem: String,
}

/// Generates a service account with a fresh RSA-2048 key (about a second in a debug build).
/// Returns it and its private key as PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), the form of
/// the `private_key` field of a service-account JSON key.
pub fn service_account_generate(client_email: &str) -> (ServiceAccount, String) {
    let key = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).expect("RSA key generation");
    let private_pem = key
        .to_pkcs8_pem(LineEnding::LF)
        .expect("PKCS#8 encoding")
        .to_string();
    let public_key_pem = key
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("SPKI encoding");
    let account = ServiceAccount {
        client_email: client_email.to_owned(),
        public_key_pem,
    };
    (account, private_pem)
}

/// A running GCP simulator.
pub struct GcpSimulator {
    pub server: RunningSimulator,
    pub faults: Faults,
    pub project: String,
    sim: Arc<Sim>,
}

impl GcpSimulator {
    /// Serves the simulator of `project`, whose only service account is `account`, on `listen`
    /// (port 0 picks one). Fails if the account's public key is not an SPKI PEM RSA key.
    pub async fn start(
        listen: SocketAddr,
        project: &str,
        account: ServiceAccount,
    ) -> std::io::Result<GcpSimulator> {
        let public_key =
            rsa::PublicKey::from_public_key_pem(&account.public_key_pem).map_err(|err| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("the service account's public key: {err}"),
                )
            })?;
        let faults = Faults::default();
        let sim = Arc::new(Sim {
            project: project.to_owned(),
            client_email: account.client_email,
            public_key,
            url: OnceLock::new(),
            faults: faults.clone(),
            tokens: Mutex::default(),
            instances: Mutex::default(),
            operations: Mutex::default(),
            request_ids: Mutex::default(),
            logs: Mutex::default(),
        });
        let compute = "/compute/v1/projects/{project}";
        let router = Router::new()
            .route("/token", post(token))
            .route(&format!("{compute}/zones/{{zone}}"), get(zone_get))
            .route(
                &format!("{compute}/zones/{{zone}}/instances"),
                post(instance_insert),
            )
            .route(
                &format!("{compute}/zones/{{zone}}/instances/{{name}}"),
                get(instance_get).delete(instance_delete),
            )
            .route(
                &format!("{compute}/zones/{{zone}}/operations/{{operation}}"),
                get(operation_get),
            )
            .route(
                &format!("{compute}/aggregated/instances"),
                get(instances_aggregated),
            )
            .route("/v2/entries:list", post(logging::entries_list))
            .with_state(sim.clone())
            .layer(axum::middleware::from_fn_with_state(
                faults.clone(),
                Faults::observe,
            ))
            .merge(faults.router())
            .fallback(unknown_route);
        let server = RunningSimulator::serve(listen, router).await?;
        let _ = sim.url.set(server.url());
        Ok(GcpSimulator {
            server,
            faults,
            project: project.to_owned(),
            sim,
        })
    }

    /// `http://addr`: the base of the Compute API (`compute_endpoint` of the plugin).
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// `http://addr/token`: the token endpoint, the audience assertions must name
    /// (`token_uri` of the plugin).
    pub fn token_url(&self) -> String {
        format!("{}/token", self.url())
    }

    /// Connections its API (and token endpoint) accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.server.connections_accepted()
    }

    /// How many instances exist, in every zone and state.
    pub fn instance_count(&self) -> usize {
        self.sim.instances.lock().expect("not poisoned").len()
    }

    /// Stops the instances named `name` (in any zone) as if they had crashed: their server
    /// goes away and their status becomes `TERMINATED`. Returns whether there was one.
    pub fn terminate(&self, name: &str) -> bool {
        self.terminate_where(|instance| instance.name == name) > 0
    }

    /// Stops every instance, as a cloud does with the machines of an account it suspends.
    /// Returns how many there were.
    pub fn terminate_all(&self) -> usize {
        self.terminate_where(|_| true)
    }

    fn terminate_where(&self, which: impl Fn(&SimInstance) -> bool) -> usize {
        let mut instances = self.sim.instances.lock().expect("not poisoned");
        let mut stopped = 0;
        for instance in instances.values_mut().filter(|i| which(i)) {
            instance.status = "TERMINATED";
            instance.server = None;
            stopped += 1;
        }
        stopped
    }

    /// Makes the running instance of the control plane's instance key `key` (its
    /// `bulkhead-key` label) answer every request with `status`. Returns whether there was one.
    pub fn instance_answer_with(&self, key: &str, status: StatusCode) -> bool {
        let instances = self.sim.instances.lock().expect("not poisoned");
        let mut found = false;
        for instance in instances.values() {
            if instance.labels.get("bulkhead-key").map(String::as_str) == Some(key)
                && let Some(server) = &instance.server
            {
                server.answer_with(status);
                found = true;
            }
        }
        found
    }

    /// What the instance of the control plane's instance key `key` (its `bulkhead-key`
    /// label) printed, in any state; `None` when there is no such instance. The handle reads
    /// the lines ([`Output::lines`]) and adds some ([`Output::print`]), which
    /// `entries:list` then serves.
    pub fn instance_output(&self, key: &str) -> Option<Output> {
        let instances = self.sim.instances.lock().expect("not poisoned");
        instances
            .values()
            .find(|instance| instance.labels.get("bulkhead-key").map(String::as_str) == Some(key))
            .map(|instance| instance.output.clone())
    }

    /// Makes the instance of key `key` print `text` on `stream`. Returns whether there was one.
    pub fn instance_print(&self, key: &str, stream: OutputStream, text: &str) -> bool {
        self.instance_output(key)
            .map(|output| output.print(stream, text))
            .is_some()
    }

    /// The numeric id of the instance of key `key` (the `instance_id` of its log entries).
    pub fn instance_id(&self, key: &str) -> Option<u64> {
        let instances = self.sim.instances.lock().expect("not poisoned");
        instances
            .values()
            .find(|instance| instance.labels.get("bulkhead-key").map(String::as_str) == Some(key))
            .map(|instance| instance.id)
    }

    /// The value of metadata item `key` of each instance that runs, in no particular order
    /// (`bulkhead-artifact`: what each was asked to run).
    pub fn instance_metadata(&self, key: &str) -> Vec<String> {
        let instances = self.sim.instances.lock().expect("not poisoned");
        instances
            .values()
            .filter(|instance| instance.server.is_some())
            .filter_map(|instance| {
                instance
                    .metadata
                    .iter()
                    .find(|(name, _)| name == key)
                    .map(|(_, value)| value.clone())
            })
            .collect()
    }

    /// How many access tokens it has issued.
    pub fn tokens_issued(&self) -> usize {
        self.sim.tokens.lock().expect("not poisoned").len()
    }

    /// Expires every access token issued so far (the next API call with one gets a 401).
    pub fn expire_tokens(&self) {
        let past = Instant::now();
        for token in self.sim.tokens.lock().expect("not poisoned").values_mut() {
            token.expires = past;
        }
    }

    /// Stops the simulator and every instance.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.sim.instances.lock().expect("not poisoned").clear();
        self.server.shutdown().await
    }
}

/// The simulator's state, shared by its handlers.
struct Sim {
    project: String,
    client_email: String,
    public_key: rsa::PublicKey,
    /// `http://addr`, set once the listener is bound.
    url: OnceLock<String>,
    faults: Faults,
    tokens: Mutex<HashMap<String, IssuedToken>>,
    /// By (zone, name).
    instances: Mutex<BTreeMap<(String, String), SimInstance>>,
    /// By (zone, name).
    operations: Mutex<HashMap<(String, String), Value>>,
    /// `requestId` of an insert → (zone, operation name).
    request_ids: Mutex<HashMap<String, (String, String)>>,
    /// What each instance printed, by instance id; kept when the instance is deleted.
    logs: Mutex<BTreeMap<u64, logging::InstanceLog>>,
}

/// Why a call was refused before its API looked at it.
enum Refusal {
    Failing,
    RateLimited(u32),
    MissingCredentials,
    InvalidCredentials,
    InsufficientScopes,
    Suspended,
}

struct IssuedToken {
    expires: Instant,
    email: String,
    scopes: Vec<String>,
}

struct SimInstance {
    id: u64,
    name: String,
    zone: String,
    machine_type: String,
    source_image: String,
    network: String,
    labels: BTreeMap<String, String>,
    metadata: Vec<(String, String)>,
    status: &'static str,
    created: String,
    ip: String,
    /// The instance's workload; `None` once terminated.
    server: Option<InstanceServer>,
    /// What its workload printed (kept once terminated).
    output: Output,
}

// ---------------------------------------------------------------------------------------------
// The token endpoint.

async fn token(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    let faults = sim.faults.apply().await;
    if faults.failing {
        return oauth_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "internal_failure",
            "Backend Error",
        );
    }
    if let Some(secs) = faults.rate_limited_secs {
        let mut response = oauth_error(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_exceeded",
            "Rate Limit Exceeded",
        );
        retry_after(&mut response, secs);
        return response;
    }
    let Ok(Form(form)) = form else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Invalid request: expected an application/x-www-form-urlencoded body",
        );
    };
    match form.get("grant_type").map(String::as_str) {
        Some(JWT_BEARER_GRANT) => {}
        Some(other) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                &format!("Invalid grant_type: {other}"),
            );
        }
        None => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "Missing required parameter: grant_type",
            );
        }
    }
    let Some(assertion) = form.get("assertion") else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Missing required parameter: assertion",
        );
    };
    let host_token_url = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .map(|host| format!("http://{host}/token"));
    let claims = match sim.verify_assertion(assertion, host_token_url.as_deref()) {
        Ok(claims) => claims,
        Err((error, description)) => {
            return oauth_error(StatusCode::BAD_REQUEST, error, &description);
        }
    };
    if faults.suspended {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "Account disabled");
    }
    let access_token = format!("ya29.{}", random_urlsafe(48));
    sim.tokens.lock().expect("not poisoned").insert(
        access_token.clone(),
        IssuedToken {
            expires: Instant::now() + TOKEN_TTL,
            email: claims.iss,
            scopes: claims.scopes,
        },
    );
    Json(json!({
        "access_token": access_token,
        "expires_in": TOKEN_TTL.as_secs(),
        "token_type": "Bearer",
    }))
    .into_response()
}

struct VerifiedClaims {
    iss: String,
    scopes: Vec<String>,
}

impl Sim {
    fn token_url(&self) -> String {
        format!("{}/token", self.base_url())
    }

    fn base_url(&self) -> &str {
        self.url.get().map(String::as_str).unwrap_or_default()
    }

    /// Checks a JWT assertion as Google's token endpoint does; on refusal, the OAuth `error`
    /// and Google's `error_description`.
    fn verify_assertion(
        &self,
        assertion: &str,
        host_token_url: Option<&str>,
    ) -> Result<VerifiedClaims, (&'static str, String)> {
        let malformed = || {
            (
                "invalid_grant",
                "Invalid JWT: malformed assertion".to_owned(),
            )
        };
        let parts: Vec<&str> = assertion.split('.').collect();
        let [header_b64, claims_b64, signature_b64] = parts[..] else {
            return Err(malformed());
        };
        let header: Value = b64_json(header_b64).ok_or_else(malformed)?;
        let claims: Value = b64_json(claims_b64).ok_or_else(malformed)?;
        let signature = b64url_decode(signature_b64).ok_or_else(malformed)?;
        if header.get("alg").and_then(Value::as_str) != Some("RS256") {
            return Err((
                "invalid_grant",
                "Invalid JWT: the signing algorithm must be RS256".to_owned(),
            ));
        }
        // Google finds the account by `iss` first, then checks the signature with its keys.
        let iss = claims
            .get("iss")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if iss != self.client_email {
            return Err((
                "invalid_grant",
                "Invalid grant: account not found".to_owned(),
            ));
        }
        let signing_input = &assertion[..header_b64.len() + 1 + claims_b64.len()];
        if self
            .public_key
            .pkcs1v15_verify::<Sha256>(signing_input.as_bytes(), &signature)
            .is_err()
        {
            return Err(("invalid_grant", "Invalid JWT Signature.".to_owned()));
        }
        let token_url = self.token_url();
        let aud = claims
            .get("aud")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if aud != token_url && Some(aud) != host_token_url {
            return Err((
                "invalid_grant",
                format!("Invalid JWT: Failed audience check. The right audience is {token_url}"),
            ));
        }
        let now = unix_now();
        let (Some(iat), Some(exp)) = (
            claims.get("iat").and_then(Value::as_i64),
            claims.get("exp").and_then(Value::as_i64),
        ) else {
            return Err((
                "invalid_grant",
                "Invalid JWT: missing iat or exp".to_owned(),
            ));
        };
        if exp <= iat || exp - iat > 3600 || iat > now + LEEWAY_SECS || exp < now - LEEWAY_SECS {
            return Err((
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable \
                 timeframe. Check your iat and exp values in the JWT claim."
                    .to_owned(),
            ));
        }
        let scopes: Vec<String> = claims
            .get("scope")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if scopes.is_empty() {
            return Err((
                "invalid_scope",
                "Empty or missing scope not allowed.".to_owned(),
            ));
        }
        if scopes
            .iter()
            .any(|scope| !scope.starts_with("https://www.googleapis.com/auth/"))
        {
            return Err((
                "invalid_scope",
                "Invalid OAuth scope or ID token audience provided.".to_owned(),
            ));
        }
        Ok(VerifiedClaims {
            iss: iss.to_owned(),
            scopes,
        })
    }
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (
        status,
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response()
}

// ---------------------------------------------------------------------------------------------
// The Compute API.

impl Sim {
    /// What every Compute call goes through: faults, then the bearer token and its scopes,
    /// then the project. Returns the caller's email.
    async fn guard(
        &self,
        headers: &HeaderMap,
        project: &str,
        write: bool,
    ) -> Result<String, Response> {
        let allowed: &[&str] = if write {
            &[COMPUTE_SCOPE, CLOUD_PLATFORM_SCOPE]
        } else {
            &[
                COMPUTE_SCOPE,
                CLOUD_PLATFORM_SCOPE,
                COMPUTE_READONLY_SCOPE,
                CLOUD_PLATFORM_READONLY_SCOPE,
            ]
        };
        let email = self
            .authorize(headers, allowed)
            .await
            .map_err(|refusal| self.compute_refusal(refusal))?;
        if project != self.project {
            return Err(not_found(&format!("projects/{project}")));
        }
        Ok(email)
    }

    /// What every API call goes through, in Google's order: faults, then the bearer token
    /// and whether one of its scopes is `allowed`, then the project's suspension. Returns the
    /// caller's email; each API renders a refusal in its own style.
    async fn authorize(&self, headers: &HeaderMap, allowed: &[&str]) -> Result<String, Refusal> {
        let faults = self.faults.apply().await;
        if faults.failing {
            return Err(Refusal::Failing);
        }
        if let Some(secs) = faults.rate_limited_secs {
            return Err(Refusal::RateLimited(secs));
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                let (scheme, token) = value.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        let Some(bearer) = bearer else {
            return Err(Refusal::MissingCredentials);
        };
        let (email, scoped) = {
            let tokens = self.tokens.lock().expect("not poisoned");
            match tokens.get(bearer) {
                Some(token) if token.expires > Instant::now() => {
                    let scoped = token
                        .scopes
                        .iter()
                        .any(|scope| allowed.contains(&scope.as_str()));
                    (token.email.clone(), scoped)
                }
                _ => return Err(Refusal::InvalidCredentials),
            }
        };
        if !scoped {
            return Err(Refusal::InsufficientScopes);
        }
        if faults.suspended {
            return Err(Refusal::Suspended);
        }
        Ok(email)
    }

    /// A refusal as the Compute API words it.
    fn compute_refusal(&self, refusal: Refusal) -> Response {
        match refusal {
            Refusal::Failing => google_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                "backendError",
                "Internal error. Please try again or contact Google Support.",
            ),
            Refusal::RateLimited(secs) => {
                let mut response = google_error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "RESOURCE_EXHAUSTED",
                    "rateLimitExceeded",
                    &format!(
                        "Quota exceeded for quota metric 'Queries' and limit 'Queries per \
                         minute' of service 'compute.googleapis.com' for consumer 'project:{}'.",
                        self.project
                    ),
                );
                retry_after(&mut response, secs);
                response
            }
            Refusal::MissingCredentials => unauthenticated(
                "required",
                "Request is missing required authentication credential. Expected OAuth 2 access \
                 token, login cookie or other valid authentication credential. See \
                 https://developers.google.com/identity/sign-in/web/devconsole-project.",
            ),
            Refusal::InvalidCredentials => unauthenticated(
                "authError",
                "Request had invalid authentication credentials. Expected OAuth 2 access \
                 token, login cookie or other valid authentication credential. See \
                 https://developers.google.com/identity/sign-in/web/devconsole-project.",
            ),
            Refusal::InsufficientScopes => google_error_with(
                StatusCode::FORBIDDEN,
                "PERMISSION_DENIED",
                "insufficientPermissions",
                "Request had insufficient authentication scopes.",
                "Insufficient Permission",
            ),
            Refusal::Suspended => google_error(
                StatusCode::FORBIDDEN,
                "PERMISSION_DENIED",
                "projectSuspended",
                &format!(
                    "Project {} cannot accept requests while it is suspended.",
                    self.project
                ),
            ),
        }
    }

    fn zone_url(&self, zone: &str) -> String {
        format!(
            "{}/compute/v1/projects/{}/zones/{zone}",
            self.base_url(),
            self.project
        )
    }

    fn instance_json(&self, instance: &SimInstance) -> Value {
        let zone_url = self.zone_url(&instance.zone);
        let items: Vec<Value> = instance
            .metadata
            .iter()
            .map(|(key, value)| json!({"key": key, "value": value}))
            .collect();
        json!({
            "kind": "compute#instance",
            "id": instance.id.to_string(),
            "creationTimestamp": instance.created,
            "name": instance.name,
            "machineType": instance.machine_type,
            "status": instance.status,
            "zone": zone_url,
            "canIpForward": false,
            "networkInterfaces": [{
                "kind": "compute#networkInterface",
                "name": "nic0",
                "network": instance.network,
                "networkIP": instance.ip,
            }],
            "disks": [{
                "kind": "compute#attachedDisk",
                "type": "PERSISTENT",
                "mode": "READ_WRITE",
                "boot": true,
                "autoDelete": true,
                "index": 0,
                "deviceName": "persistent-disk-0",
                "source": format!("{zone_url}/disks/{}", instance.name),
                "licenses": [instance.source_image],
            }],
            "metadata": {"kind": "compute#metadata", "items": items},
            "labels": instance.labels,
            "selfLink": format!("{zone_url}/instances/{}", instance.name),
            "deletionProtection": false,
        })
    }

    /// Records a finished operation and returns it.
    fn operation(
        &self,
        zone: &str,
        operation_type: &str,
        target: &str,
        target_id: u64,
        user: &str,
    ) -> Value {
        let now = rfc3339(SystemTime::now());
        let name = format!(
            "operation-{}-{}-{}-{}",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis(),
            random_hex(13),
            random_hex(8),
            random_hex(8)
        );
        let zone_url = self.zone_url(zone);
        let operation = json!({
            "kind": "compute#operation",
            "id": random_id().to_string(),
            "name": name,
            "zone": zone_url,
            "operationType": operation_type,
            "targetLink": format!("{zone_url}/instances/{target}"),
            "targetId": target_id.to_string(),
            "status": "DONE",
            "user": user,
            "progress": 100,
            "insertTime": now,
            "startTime": now,
            "endTime": now,
            "selfLink": format!("{zone_url}/operations/{name}"),
        });
        self.operations
            .lock()
            .expect("not poisoned")
            .insert((zone.to_owned(), name), operation.clone());
        operation
    }
}

async fn zone_get(
    State(sim): State<Arc<Sim>>,
    Path((project, zone)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = sim.guard(&headers, &project, false).await {
        return response;
    }
    if !zone_valid(&zone) {
        return not_found(&format!("projects/{project}/zones/{zone}"));
    }
    let region = zone
        .rsplit_once('-')
        .map(|(region, _)| region)
        .unwrap_or_default();
    Json(json!({
        "kind": "compute#zone",
        "id": "2000",
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": zone,
        "description": zone,
        "status": "UP",
        "region": format!("{}/compute/v1/projects/{project}/regions/{region}", sim.base_url()),
        "selfLink": sim.zone_url(&zone),
        "availableCpuPlatforms": ["Intel Broadwell", "AMD Milan"],
    }))
    .into_response()
}

/// What an insert asks for, once validated.
struct InsertSpec {
    name: String,
    machine_type: String,
    source_image: String,
    network: String,
    labels: BTreeMap<String, String>,
    metadata: Vec<(String, String)>,
}

async fn instance_insert(
    State(sim): State<Arc<Sim>>,
    Path((project, zone)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let email = match sim.guard(&headers, &project, true).await {
        Ok(email) => email,
        Err(response) => return response,
    };
    if !zone_valid(&zone) {
        return not_found(&format!("projects/{project}/zones/{zone}"));
    }
    let request_id = query.get("requestId").cloned();
    if let Some(request_id) = &request_id {
        if uuid::Uuid::parse_str(request_id).map_or(true, |id| id.is_nil()) {
            return invalid(&format!(
                "Invalid value for field 'requestId': '{request_id}'. The request ID must be a \
                 valid UUID with the exception that zero UUID is not supported."
            ));
        }
        let seen = sim
            .request_ids
            .lock()
            .expect("not poisoned")
            .get(request_id)
            .cloned();
        if let Some(key) = seen
            && let Some(operation) = sim.operations.lock().expect("not poisoned").get(&key)
        {
            return Json(operation.clone()).into_response();
        }
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(err) => {
            return google_error(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "parseError",
                &format!("Invalid JSON payload received. {err}"),
            );
        }
    };
    let spec = match insert_spec(&sim.project, &zone, &body) {
        Ok(spec) => spec,
        Err(message) => return invalid(&message),
    };
    let key = (zone.clone(), spec.name.clone());
    let already_exists = || {
        google_error(
            StatusCode::CONFLICT,
            "ALREADY_EXISTS",
            "alreadyExists",
            &format!(
                "The resource 'projects/{project}/zones/{zone}/instances/{}' already exists",
                spec.name
            ),
        )
    };
    if sim
        .instances
        .lock()
        .expect("not poisoned")
        .contains_key(&key)
    {
        return already_exists();
    }
    let port = spec
        .metadata
        .iter()
        .find(|(key, _)| key == "bulkhead-port")
        .and_then(|(_, value)| value.trim().parse::<u16>().ok())
        .unwrap_or(DEFAULT_PORT);
    let server = match InstanceServer::start(&spec.name, port).await {
        Ok(server) => server,
        Err(err) => {
            tracing::warn!(%err, "simulated instance could not start");
            return google_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL",
                "internalError",
                &format!("Internal error: the simulated instance could not start: {err}"),
            );
        }
    };
    let id = random_id();
    let output = server.output().clone();
    {
        let mut instances = sim.instances.lock().expect("not poisoned");
        if instances.contains_key(&key) {
            return already_exists();
        }
        sim.logs.lock().expect("not poisoned").insert(
            id,
            logging::InstanceLog {
                zone: zone.clone(),
                output: output.clone(),
                insert_prefix: random_hex(6),
            },
        );
        instances.insert(
            key,
            SimInstance {
                id,
                name: spec.name.clone(),
                zone: zone.clone(),
                machine_type: format!("{}/machineTypes/{}", sim.zone_url(&zone), spec.machine_type),
                source_image: spec.source_image,
                network: spec.network,
                labels: spec.labels,
                metadata: spec.metadata,
                status: "RUNNING",
                created: rfc3339(SystemTime::now()),
                ip: server.addr.ip().to_string(),
                server: Some(server),
                output,
            },
        );
    }
    tracing::info!(
        project,
        zone,
        name = spec.name,
        "simulated GCP instance inserted"
    );
    let operation = sim.operation(&zone, "insert", &spec.name, id, &email);
    if let Some(request_id) = request_id {
        let name = operation["name"].as_str().unwrap_or_default().to_owned();
        sim.request_ids
            .lock()
            .expect("not poisoned")
            .insert(request_id, (zone, name));
    }
    Json(operation).into_response()
}

/// Validates an Instance resource as Compute Engine does, with its messages.
fn insert_spec(project: &str, zone: &str, body: &Value) -> Result<InsertSpec, String> {
    let field = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or_default();
    let name = field("name");
    if name.is_empty() {
        return Err("Required field 'resource.name' not specified".into());
    }
    if !gce_name_valid(name) {
        return Err(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex \
             '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        ));
    }
    let machine_type = machine_type_name(project, zone, field("machineType"))?;

    let disks = body.get("disks").and_then(Value::as_array);
    let boot: Vec<&Value> = disks
        .into_iter()
        .flatten()
        .filter(|disk| disk.get("boot").and_then(Value::as_bool) == Some(true))
        .collect();
    let [boot] = boot[..] else {
        return Err(if disks.is_none_or(|disks| disks.is_empty()) {
            "Invalid value for field 'resource.disks': ''. Boot disk must be specified.".into()
        } else {
            "Invalid value for field 'resource.disks': ''. Exactly one boot disk must be \
             specified."
                .into()
        });
    };
    let source_image = boot
        .pointer("/initializeParams/sourceImage")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let source = boot
        .get("source")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if source.is_empty() && !source_image.contains("global/images/") {
        return Err(format!(
            "Invalid value for field 'resource.disks[0].initializeParams.sourceImage': \
             '{source_image}'. The URL is malformed."
        ));
    }

    let network = body
        .pointer("/networkInterfaces/0/network")
        .and_then(Value::as_str)
        .unwrap_or("global/networks/default")
        .to_owned();

    let mut labels = BTreeMap::new();
    match body.get("labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            if map.len() > 64 {
                return Err(
                    "Invalid value for field 'resource.labels': ''. Resource can have \
                            at most 64 labels."
                        .into(),
                );
            }
            for (key, value) in map {
                let value = value.as_str().unwrap_or_default();
                if !label_key_valid(key) {
                    return Err(format!(
                        "Invalid value for field 'resource.labels': ''. Label key '{key}' \
                         violates format constraints. The key must start with a lowercase \
                         character, can only contain lowercase letters, numeric characters, \
                         underscores and dashes. The key can be at most 63 characters long."
                    ));
                }
                if !label_value_valid(value) {
                    return Err(format!(
                        "Invalid value for field 'resource.labels': ''. Label value '{value}' \
                         violates format constraints. The value can only contain lowercase \
                         letters, numeric characters, underscores and dashes. The value can be \
                         at most 63 characters long."
                    ));
                }
                labels.insert(key.clone(), value.to_owned());
            }
        }
        Some(_) => {
            return Err("Invalid value for field 'resource.labels': ''. Must be a map.".into());
        }
    }

    let mut metadata: Vec<(String, String)> = Vec::new();
    let items = body
        .pointer("/metadata/items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let mut size = 0;
    for item in items {
        let key = item.get("key").and_then(Value::as_str).unwrap_or_default();
        let value = item
            .get("value")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if key.is_empty()
            || key.len() > 128
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "Invalid value for field 'resource.metadata': ''. Metadata key '{key}' must be \
                 1-128 characters of letters, digits, '-' and '_'."
            ));
        }
        if metadata.iter().any(|(seen, _)| seen == key) {
            return Err(format!(
                "Invalid value for field 'resource.metadata': ''. Duplicate metadata key '{key}'."
            ));
        }
        size += key.len() + value.len();
        metadata.push((key.to_owned(), value.to_owned()));
    }
    if size > 512 * 1024 {
        return Err(
            "Invalid value for field 'resource.metadata': ''. Metadata is larger than \
                    512 KB."
                .into(),
        );
    }

    Ok(InsertSpec {
        name: name.to_owned(),
        machine_type,
        source_image: source_image.to_owned(),
        network,
        labels,
        metadata,
    })
}

/// The machine type's name, from the partial or full URL an insert must give
/// (`zones/ZONE/machineTypes/TYPE`), checked against the instance's project and zone.
fn machine_type_name(project: &str, zone: &str, machine_type: &str) -> Result<String, String> {
    let invalid = |why: &str| {
        format!("Invalid value for field 'resource.machineType': '{machine_type}'. {why}")
    };
    if machine_type.is_empty() {
        return Err(invalid("Machine type must be specified."));
    }
    let path = machine_type
        .split_once("/compute/v1/")
        .map_or(machine_type, |(_, path)| path);
    let segments: Vec<&str> = path.split('/').collect();
    let tail = match segments[..] {
        ["projects", owner, ref tail @ ..] => {
            if owner != project {
                return Err(invalid(
                    "The machine type must be in the instance's project.",
                ));
            }
            tail
        }
        ref tail => tail,
    };
    let ["zones", type_zone, "machineTypes", name] = tail[..] else {
        return Err(invalid(
            "Must be a URL to a machine type: zones/ZONE/machineTypes/TYPE.",
        ));
    };
    if type_zone != zone {
        return Err(invalid(&format!(
            "Machine type specified '{name}' is in a different scope than the instance."
        )));
    }
    if !machine_type_known(name) {
        return Err(invalid(&format!(
            "Machine type with name '{name}' does not exist in zone '{zone}'."
        )));
    }
    Ok(name.to_owned())
}

fn machine_type_known(name: &str) -> bool {
    if matches!(
        name,
        "e2-micro" | "e2-small" | "e2-medium" | "f1-micro" | "g1-small"
    ) {
        return true;
    }
    let parts: Vec<&str> = name.split('-').collect();
    matches!(
        parts[..],
        [family, "standard" | "highmem" | "highcpu", cpus]
            if ["e2", "n1", "n2", "n2d", "n4", "c2", "c2d", "c3", "t2d"].contains(&family)
                && cpus.parse::<u32>().is_ok_and(|n| (1..=224).contains(&n))
    )
}

async fn instance_get(
    State(sim): State<Arc<Sim>>,
    Path((project, zone, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = sim.guard(&headers, &project, false).await {
        return response;
    }
    let instances = sim.instances.lock().expect("not poisoned");
    match instances.get(&(zone.clone(), name.clone())) {
        Some(instance) => Json(sim.instance_json(instance)).into_response(),
        None => not_found(&format!("projects/{project}/zones/{zone}/instances/{name}")),
    }
}

async fn instance_delete(
    State(sim): State<Arc<Sim>>,
    Path((project, zone, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let email = match sim.guard(&headers, &project, true).await {
        Ok(email) => email,
        Err(response) => return response,
    };
    let removed = sim
        .instances
        .lock()
        .expect("not poisoned")
        .remove(&(zone.clone(), name.clone()));
    // Dropping the instance stops its server.
    let Some(instance) = removed else {
        return not_found(&format!("projects/{project}/zones/{zone}/instances/{name}"));
    };
    tracing::info!(project, zone, name, "simulated GCP instance deleted");
    Json(sim.operation(&zone, "delete", &name, instance.id, &email)).into_response()
}

async fn operation_get(
    State(sim): State<Arc<Sim>>,
    Path((project, zone, operation)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = sim.guard(&headers, &project, false).await {
        return response;
    }
    let operations = sim.operations.lock().expect("not poisoned");
    match operations.get(&(zone.clone(), operation.clone())) {
        Some(found) => Json(found.clone()).into_response(),
        None => not_found(&format!(
            "projects/{project}/zones/{zone}/operations/{operation}"
        )),
    }
}

async fn instances_aggregated(
    State(sim): State<Arc<Sim>>,
    Path(project): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = sim.guard(&headers, &project, false).await {
        return response;
    }
    let filter = match query.get("filter").map(|filter| Filter::parse(filter)) {
        None => None,
        Some(Ok(filter)) => Some(filter),
        Some(Err(filter)) => {
            return invalid(&format!(
                "Invalid value for field 'filter': '{filter}'. Invalid list filter expression."
            ));
        }
    };
    let max_results = match query.get("maxResults").map(|n| n.parse::<usize>()) {
        None => 500,
        Some(Ok(n)) if (1..=500).contains(&n) => n,
        Some(_) => {
            return invalid("Invalid value for field 'maxResults': must be between 1 and 500.");
        }
    };
    let start = match query.get("pageToken").map(|token| token.parse::<usize>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return invalid("Invalid value for field 'pageToken'."),
    };

    let instances = sim.instances.lock().expect("not poisoned");
    let matching: Vec<&SimInstance> = instances
        .values()
        .filter(|instance| {
            filter
                .as_ref()
                .is_none_or(|filter| filter.matches(instance))
        })
        .collect();
    let page = matching.iter().skip(start).take(max_results);
    let mut items: BTreeMap<String, Value> = BTreeMap::new();
    for instance in page {
        let scope = items
            .entry(format!("zones/{}", instance.zone))
            .or_insert_with(|| json!({"instances": []}));
        scope["instances"]
            .as_array_mut()
            .expect("an array")
            .push(sim.instance_json(instance));
    }
    let mut zones: Vec<String> = LISTED_ZONES.iter().map(|zone| (*zone).to_owned()).collect();
    zones.extend(instances.values().map(|instance| instance.zone.clone()));
    for zone in zones {
        let scope = format!("zones/{zone}");
        items.entry(scope.clone()).or_insert_with(|| {
            json!({"warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": format!("There are no results for scope '{scope}' on this page."),
                "data": [{"key": "scope", "value": scope}],
            }})
        });
    }
    let mut body = json!({
        "kind": "compute#instanceAggregatedList",
        "id": format!("projects/{project}/aggregated/instances"),
        "items": items,
        "selfLink": format!("{}/compute/v1/projects/{project}/aggregated/instances", sim.base_url()),
    });
    if start + max_results < matching.len() {
        body["nextPageToken"] = json!((start + max_results).to_string());
    }
    Json(body).into_response()
}

/// A list filter: `FIELD = VALUE`, FIELD `name` or `labels.KEY`, VALUE optionally quoted.
struct Filter {
    field: String,
    value: String,
}

impl Filter {
    fn parse(filter: &str) -> Result<Filter, &str> {
        let expression = filter
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .trim();
        let (field, value) = expression.split_once('=').ok_or(filter)?;
        let field = field.trim();
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|value| value.strip_suffix('"'))
            .unwrap_or(value);
        let known = field == "name"
            || field
                .strip_prefix("labels.")
                .is_some_and(|key| !key.is_empty());
        if !known || value.contains(['=', ' ', '"']) {
            return Err(filter);
        }
        Ok(Filter {
            field: field.to_owned(),
            value: value.to_owned(),
        })
    }

    fn matches(&self, instance: &SimInstance) -> bool {
        match self.field.strip_prefix("labels.") {
            Some(key) => instance.labels.get(key) == Some(&self.value),
            None => instance.name == self.value,
        }
    }
}

async fn unknown_route() -> Response {
    google_error(StatusCode::NOT_FOUND, "NOT_FOUND", "notFound", "Not Found")
}

// ---------------------------------------------------------------------------------------------
// Google's error shapes and small helpers.

/// `{"error":{"code","message","errors":[{"message","domain":"global","reason"}],"status"}}`.
fn google_error(code: StatusCode, status: &str, reason: &str, message: &str) -> Response {
    google_error_with(code, status, reason, message, message)
}

fn google_error_with(
    code: StatusCode,
    status: &str,
    reason: &str,
    message: &str,
    detail: &str,
) -> Response {
    let body = json!({"error": {
        "code": code.as_u16(),
        "message": message,
        "errors": [{"message": detail, "domain": "global", "reason": reason}],
        "status": status,
    }});
    (code, Json(body)).into_response()
}

fn retry_after(response: &mut Response, secs: u32) {
    response.headers_mut().insert(
        header::RETRY_AFTER,
        secs.to_string().parse().expect("digits"),
    );
}

fn unauthenticated(reason: &str, message: &str) -> Response {
    let mut response = google_error_with(
        StatusCode::UNAUTHORIZED,
        "UNAUTHENTICATED",
        reason,
        message,
        if reason == "required" {
            "Login Required."
        } else {
            "Invalid Credentials"
        },
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        "Bearer realm=\"https://accounts.google.com/\""
            .parse()
            .expect("a valid header"),
    );
    response
}

fn not_found(resource: &str) -> Response {
    google_error(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "notFound",
        &format!("The resource '{resource}' was not found"),
    )
}

fn invalid(message: &str) -> Response {
    google_error(
        StatusCode::BAD_REQUEST,
        "INVALID_ARGUMENT",
        "invalid",
        message,
    )
}

/// A resource name: `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`.
fn gce_name_valid(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[bytes.len() - 1] != b'-'
}

fn label_key_valid(key: &str) -> bool {
    key.as_bytes().first().is_some_and(u8::is_ascii_lowercase) && label_value_valid(key)
}

fn label_value_valid(value: &str) -> bool {
    value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Shaped like a GCP zone: `us-central1-a`, `europe-west4-b`, ...
fn zone_valid(zone: &str) -> bool {
    let parts: Vec<&str> = zone.split('-').collect();
    matches!(
        parts[..],
        [area, location, letter]
            if !area.is_empty()
                && area.bytes().all(|b| b.is_ascii_lowercase())
                && location.len() >= 2
                && location.bytes().last().is_some_and(|b| b.is_ascii_digit())
                && location.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && letter.len() == 1
                && letter.bytes().all(|b| b.is_ascii_lowercase())
    )
}

fn b64url_decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

fn b64_json(text: &str) -> Option<Value> {
    serde_json::from_slice(&b64url_decode(text)?).ok()
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    getrandom::fill(&mut bytes).expect("the system's random numbers");
    bytes
}

fn random_urlsafe(bytes: usize) -> String {
    let mut buffer = vec![0; bytes];
    getrandom::fill(&mut buffer).expect("the system's random numbers");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buffer)
}

fn random_hex(digits: usize) -> String {
    let bytes = random_bytes::<16>();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex[..digits.min(hex.len())].to_owned()
}

/// A numeric id as Google gives them (19 digits).
fn random_id() -> u64 {
    1_000_000_000_000_000_000 + u64::from_le_bytes(random_bytes()) % 8_000_000_000_000_000_000
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `2026-05-01T10:20:30.123+00:00`, the form of `creationTimestamp`.
fn rfc3339(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use rsa::pkcs8::DecodePrivateKey;

    use super::*;
    use crate::faults::FaultState;

    const PROJECT: &str = "shop-prod";
    const EMAIL: &str = "bulkhead@shop-prod.iam.gserviceaccount.com";
    const ZONE: &str = "us-central1-a";

    /// One key pair for the tests of this module (generating one takes a moment).
    fn account() -> &'static (ServiceAccount, String) {
        static ACCOUNT: OnceLock<(ServiceAccount, String)> = OnceLock::new();
        ACCOUNT.get_or_init(|| service_account_generate(EMAIL))
    }

    async fn simulator() -> GcpSimulator {
        GcpSimulator::start("127.0.0.1:0".parse().unwrap(), PROJECT, account().0.clone())
            .await
            .unwrap()
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    /// A JWT signed with `private_pem`.
    fn assertion(private_pem: &str, claims: &Value) -> String {
        let key = rsa::PrivateKey::from_pkcs8_pem(private_pem).unwrap();
        let input = format!(
            "{}.{}",
            b64(br#"{"alg":"RS256","typ":"JWT"}"#),
            b64(claims.to_string().as_bytes())
        );
        let signature = key.pkcs1v15_sign::<Sha256>(input.as_bytes()).unwrap();
        format!("{input}.{}", b64(&signature))
    }

    fn claims(sim: &GcpSimulator) -> Value {
        let now = unix_now();
        json!({
            "iss": EMAIL,
            "scope": COMPUTE_SCOPE,
            "aud": sim.token_url(),
            "iat": now,
            "exp": now + 3600,
        })
    }

    fn form_encode(text: &str) -> String {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    async fn exchange(sim: &GcpSimulator, assertion: &str) -> (u16, Value) {
        let body = format!(
            "grant_type={}&assertion={}",
            form_encode(JWT_BEARER_GRANT),
            form_encode(assertion)
        );
        let response = crate::test_http()
            .post(sim.token_url())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    async fn access_token(sim: &GcpSimulator) -> String {
        let (status, body) = exchange(sim, &assertion(&account().1, &claims(sim))).await;
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    fn instance_body(name: &str, port: u16) -> Value {
        json!({
            "name": name,
            "machineType": format!("zones/{ZONE}/machineTypes/e2-small"),
            "disks": [{"boot": true, "autoDelete": true, "initializeParams": {
                "sourceImage": "projects/cos-cloud/global/images/family/cos-stable"}}],
            "networkInterfaces": [{"network": "global/networks/default"}],
            "labels": {"bulkhead-managed": "true", "bulkhead-key": name},
            "metadata": {"items": [{"key": "bulkhead-port", "value": port.to_string()}]},
        })
    }

    async fn call(
        method: reqwest::Method,
        url: String,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, HeaderMap, Value) {
        let mut request = crate::test_http().request(method, url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (
            status,
            headers,
            response.json().await.unwrap_or(Value::Null),
        )
    }

    fn zone_url(sim: &GcpSimulator) -> String {
        format!("{}/compute/v1/projects/{PROJECT}/zones/{ZONE}", sim.url())
    }

    #[tokio::test]
    async fn a_correctly_signed_assertion_gets_a_token() {
        let sim = simulator().await;
        let (status, body) = exchange(&sim, &assertion(&account().1, &claims(&sim))).await;
        assert_eq!(status, 200, "{body}");
        assert!(body["access_token"].as_str().unwrap().starts_with("ya29."));
        assert_eq!(body["expires_in"], 3600);
        assert_eq!(body["token_type"], "Bearer");
    }

    #[tokio::test]
    async fn assertions_signed_with_another_key_or_for_another_audience_are_refused() {
        let sim = simulator().await;
        let (_, other_key) = service_account_generate(EMAIL);
        let (status, body) = exchange(&sim, &assertion(&other_key, &claims(&sim))).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"], "invalid_grant");
        assert_eq!(body["error_description"], "Invalid JWT Signature.");

        let mut wrong_audience = claims(&sim);
        wrong_audience["aud"] = json!("https://oauth2.googleapis.com/token");
        let (status, body) = exchange(&sim, &assertion(&account().1, &wrong_audience)).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"], "invalid_grant");
        assert!(
            body["error_description"]
                .as_str()
                .unwrap()
                .contains("audience")
        );

        let mut too_long = claims(&sim);
        too_long["exp"] = json!(unix_now() + 7200);
        let (status, body) = exchange(&sim, &assertion(&account().1, &too_long)).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_grant"))
        );

        let mut expired = claims(&sim);
        expired["iat"] = json!(unix_now() - 7200);
        expired["exp"] = json!(unix_now() - 3600);
        let (status, _) = exchange(&sim, &assertion(&account().1, &expired)).await;
        assert_eq!(status, 400);

        let mut stranger = claims(&sim);
        stranger["iss"] = json!("someone@else.iam.gserviceaccount.com");
        let (status, body) = exchange(&sim, &assertion(&account().1, &stranger)).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_grant"))
        );

        let mut no_scope = claims(&sim);
        no_scope["scope"] = json!("");
        let (status, body) = exchange(&sim, &assertion(&account().1, &no_scope)).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_scope"))
        );

        let (status, body) = exchange(&sim, "not.a.jwt").await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_grant"))
        );
    }

    #[tokio::test]
    async fn the_api_refuses_missing_unknown_expired_and_unscoped_tokens() {
        let sim = simulator().await;
        let (status, headers, body) = call(reqwest::Method::GET, zone_url(&sim), None, None).await;
        assert_eq!(status, 401);
        assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
        assert!(headers.contains_key("www-authenticate"));
        let (status, _, body) = call(
            reqwest::Method::GET,
            zone_url(&sim),
            Some("ya29.nope"),
            None,
        )
        .await;
        assert_eq!(status, 401);
        assert_eq!(body["error"]["errors"][0]["reason"], "authError");
        assert_eq!(body["error"]["code"], 401);

        let token = access_token(&sim).await;
        let (status, _, body) =
            call(reqwest::Method::GET, zone_url(&sim), Some(&token), None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["name"], ZONE);
        assert_eq!(body["status"], "UP");
        let other_project = zone_url(&sim).replace(PROJECT, "someone-elses");
        let (status, _, body) = call(reqwest::Method::GET, other_project, Some(&token), None).await;
        assert_eq!(status, 404);
        assert_eq!(body["error"]["errors"][0]["reason"], "notFound");

        sim.expire_tokens();
        let (status, _, _) = call(reqwest::Method::GET, zone_url(&sim), Some(&token), None).await;
        assert_eq!(status, 401);

        let mut read_only = claims(&sim);
        read_only["scope"] = json!(COMPUTE_READONLY_SCOPE);
        let (_, body) = exchange(&sim, &assertion(&account().1, &read_only)).await;
        let reader = body["access_token"].as_str().unwrap();
        let (status, _, _) = call(reqwest::Method::GET, zone_url(&sim), Some(reader), None).await;
        assert_eq!(status, 200);
        let (status, _, body) = call(
            reqwest::Method::POST,
            format!("{}/instances", zone_url(&sim)),
            Some(reader),
            Some(&instance_body("web-1", 0)),
        )
        .await;
        assert_eq!(status, 403);
        assert_eq!(
            body["error"]["errors"][0]["reason"],
            "insufficientPermissions"
        );
        assert_eq!(sim.instance_count(), 0);
    }

    #[tokio::test]
    async fn instances_are_inserted_read_listed_and_deleted() {
        let sim = simulator().await;
        let token = access_token(&sim).await;
        let instances = format!("{}/instances", zone_url(&sim));
        let (status, _, operation) = call(
            reqwest::Method::POST,
            instances.clone(),
            Some(&token),
            Some(&instance_body("web-1", 0)),
        )
        .await;
        assert_eq!(status, 200, "{operation}");
        assert_eq!(operation["kind"], "compute#operation");
        assert_eq!(operation["operationType"], "insert");
        assert_eq!(operation["status"], "DONE");
        assert!(
            operation["name"]
                .as_str()
                .unwrap()
                .starts_with("operation-")
        );
        assert!(
            operation["targetLink"]
                .as_str()
                .unwrap()
                .ends_with("/instances/web-1")
        );
        assert_eq!(sim.instance_count(), 1);

        let (status, _, again) = call(
            reqwest::Method::GET,
            format!(
                "{}/operations/{}",
                zone_url(&sim),
                operation["name"].as_str().unwrap()
            ),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(again["id"], operation["id"]);

        let (status, _, conflict) = call(
            reqwest::Method::POST,
            instances.clone(),
            Some(&token),
            Some(&instance_body("web-1", 0)),
        )
        .await;
        assert_eq!(status, 409);
        assert_eq!(conflict["error"]["errors"][0]["reason"], "alreadyExists");
        assert_eq!(conflict["error"]["status"], "ALREADY_EXISTS");

        let (status, _, instance) = call(
            reqwest::Method::GET,
            format!("{instances}/web-1"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(status, 200, "{instance}");
        assert_eq!(instance["kind"], "compute#instance");
        assert_eq!(instance["status"], "RUNNING");
        assert_eq!(instance["id"], operation["targetId"]);
        assert!(instance["id"].as_str().unwrap().parse::<u64>().is_ok());
        assert!(
            instance["zone"]
                .as_str()
                .unwrap()
                .ends_with("/zones/us-central1-a")
        );
        assert_eq!(instance["labels"]["bulkhead-key"], "web-1");
        // The instance is real: its network IP answers with its name.
        let ip = instance["networkInterfaces"][0]["networkIP"]
            .as_str()
            .unwrap();
        let port = {
            let instances = sim.sim.instances.lock().unwrap();
            let found = instances.values().next().unwrap();
            found.server.as_ref().unwrap().addr.port()
        };
        let answer = crate::test_http()
            .get(format!("http://{ip}:{port}/"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(answer.contains("web-1"), "{answer}");

        let aggregated = format!(
            "{}/compute/v1/projects/{PROJECT}/aggregated/instances",
            sim.url()
        );
        let (status, _, list) = call(
            reqwest::Method::GET,
            format!("{aggregated}?filter=labels.bulkhead-managed%3Dtrue"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(
            list["items"]["zones/us-central1-a"]["instances"][0]["name"],
            "web-1"
        );
        assert_eq!(
            list["items"]["zones/us-central1-b"]["warning"]["code"],
            "NO_RESULTS_ON_PAGE"
        );
        let (_, _, none) = call(
            reqwest::Method::GET,
            format!("{aggregated}?filter=labels.bulkhead-managed%20%3D%20%22false%22"),
            Some(&token),
            None,
        )
        .await;
        assert!(
            none["items"]["zones/us-central1-a"]["instances"].is_null(),
            "{none}"
        );
        let (status, _, _) = call(
            reqwest::Method::GET,
            format!("{aggregated}?filter=status%20%3E%201"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(status, 400);

        let (status, _, deleted) = call(
            reqwest::Method::DELETE,
            format!("{instances}/web-1"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(deleted["operationType"], "delete");
        assert_eq!(sim.instance_count(), 0);
        let (status, _, gone) = call(
            reqwest::Method::GET,
            format!("{instances}/web-1"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(status, 404);
        assert_eq!(gone["error"]["errors"][0]["reason"], "notFound");
        let (status, _, _) = call(
            reqwest::Method::DELETE,
            format!("{instances}/web-1"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(status, 404);
        // Its server is gone with it.
        assert!(
            crate::test_http()
                .get(format!("http://{ip}:{port}/"))
                .send()
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn inserts_are_validated_and_request_ids_deduplicate() {
        let sim = simulator().await;
        let token = access_token(&sim).await;
        let instances = format!("{}/instances", zone_url(&sim));
        let mut bad_name = instance_body("Web_1", 0);
        bad_name["name"] = json!("Web_1");
        let mut bare_machine_type = instance_body("web-2", 0);
        bare_machine_type["machineType"] = json!("e2-small");
        let mut bad_label = instance_body("web-3", 0);
        bad_label["labels"]["Team"] = json!("x");
        let mut no_disk = instance_body("web-4", 0);
        no_disk["disks"] = json!([]);
        for body in [bad_name, bare_machine_type, bad_label, no_disk] {
            let (status, _, error) = call(
                reqwest::Method::POST,
                instances.clone(),
                Some(&token),
                Some(&body),
            )
            .await;
            assert_eq!(status, 400, "{body}");
            assert_eq!(error["error"]["errors"][0]["reason"], "invalid");
            assert_eq!(error["error"]["status"], "INVALID_ARGUMENT");
        }
        assert_eq!(sim.instance_count(), 0);

        let with_id = format!("{instances}?requestId=0c8a4b55-5f6e-4a43-9f0b-8a1c1f6f3e2d");
        let body = instance_body("web-5", 0);
        let (first, _, operation) = call(
            reqwest::Method::POST,
            with_id.clone(),
            Some(&token),
            Some(&body),
        )
        .await;
        let (second, _, replayed) =
            call(reqwest::Method::POST, with_id, Some(&token), Some(&body)).await;
        assert_eq!((first, second), (200, 200));
        assert_eq!(operation["name"], replayed["name"]);
        assert_eq!(sim.instance_count(), 1);

        assert!(sim.terminate("web-5"));
        let (_, _, instance) = call(
            reqwest::Method::GET,
            format!("{instances}/web-5"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(instance["status"], "TERMINATED");
    }

    #[tokio::test]
    async fn faults_render_as_google_reports_them() {
        let sim = simulator().await;
        let token = access_token(&sim).await;
        sim.faults.set(FaultState {
            suspended: true,
            ..FaultState::default()
        });
        let (status, _, body) =
            call(reqwest::Method::GET, zone_url(&sim), Some(&token), None).await;
        assert_eq!(status, 403);
        assert_eq!(body["error"]["code"], 403);
        assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
        assert_eq!(body["error"]["errors"][0]["reason"], "projectSuspended");
        assert_eq!(body["error"]["errors"][0]["domain"], "global");
        assert_eq!(
            body["error"]["message"],
            "Project shop-prod cannot accept requests while it is suspended."
        );
        let (status, body) = exchange(&sim, &assertion(&account().1, &claims(&sim))).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"], "invalid_grant");
        assert_eq!(body["error_description"], "Account disabled");

        sim.faults.set(FaultState {
            rate_limited_secs: Some(7),
            ..FaultState::default()
        });
        let (status, headers, body) =
            call(reqwest::Method::GET, zone_url(&sim), Some(&token), None).await;
        assert_eq!(status, 429);
        assert_eq!(headers["retry-after"], "7");
        assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(body["error"]["errors"][0]["reason"], "rateLimitExceeded");

        sim.faults.set(FaultState {
            failing: true,
            ..FaultState::default()
        });
        let (status, _, body) =
            call(reqwest::Method::GET, zone_url(&sim), Some(&token), None).await;
        assert_eq!(status, 503);
        assert_eq!(body["error"]["errors"][0]["reason"], "backendError");
        assert_eq!(body["error"]["status"], "UNAVAILABLE");

        // Recovery through the admin endpoint.
        let recovered = crate::test_http()
            .post(format!("{}/_sim/recover", sim.url()))
            .send()
            .await
            .unwrap();
        assert!(recovered.status().is_success());
        let (status, _, _) = call(reqwest::Method::GET, zone_url(&sim), Some(&token), None).await;
        assert_eq!(status, 200);
    }

    async fn logging_token(sim: &GcpSimulator) -> String {
        let mut both = claims(sim);
        both["scope"] = json!(format!("{COMPUTE_SCOPE} {LOGGING_READ_SCOPE}"));
        let (status, body) = exchange(sim, &assertion(&account().1, &both)).await;
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    async fn entries_list(sim: &GcpSimulator, token: Option<&str>, body: Value) -> (u16, Value) {
        let (status, _, answer) = call(
            reqwest::Method::POST,
            format!("{}/v2/entries:list", sim.url()),
            token,
            Some(&body),
        )
        .await;
        (status, answer)
    }

    /// Every page of a query, each entry's text.
    async fn entries_all(sim: &GcpSimulator, token: &str, query: Value) -> Vec<Value> {
        let mut entries = Vec::new();
        let mut query = query;
        loop {
            let (status, page) = entries_list(sim, Some(token), query.clone()).await;
            assert_eq!(status, 200, "{page}");
            entries.extend(page["entries"].as_array().cloned().unwrap_or_default());
            match page["nextPageToken"].as_str() {
                Some(next) => query["pageToken"] = json!(next),
                None => return entries,
            }
        }
    }

    fn texts(entries: &[Value]) -> Vec<String> {
        entries
            .iter()
            .map(|entry| entry["textPayload"].as_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn instance_output_is_listed_as_log_entries_page_by_page() {
        let sim = simulator().await;
        let token = logging_token(&sim).await;
        let (status, _, _) = call(
            reqwest::Method::POST,
            format!("{}/instances", zone_url(&sim)),
            Some(&token),
            Some(&instance_body("web-1", 0)),
        )
        .await;
        assert_eq!(status, 200);
        let id = sim.instance_id("web-1").unwrap();
        let output = sim.instance_output("web-1").unwrap();
        // Lines in threes that share a timestamp, and a line to stderr.
        let start = SystemTime::now() + Duration::from_secs(1);
        for n in 0..24 {
            let at = start + Duration::from_millis(n / 3);
            output.print_at(at, OutputStream::Stdout, &format!("line {n}"));
        }
        assert!(sim.instance_print("web-1", OutputStream::Stderr, "oops"));
        // The stderr line is printed now, before the others' (future) time.
        let mut expected = vec![output.lines()[0].text.clone(), "oops".to_owned()];
        expected.extend((0..24).map(|n| format!("line {n}")));

        let filter =
            format!("resource.type=\"gce_instance\" AND resource.labels.instance_id=\"{id}\"");
        let query = json!({
            "resourceNames": [format!("projects/{PROJECT}")],
            "filter": filter,
            "orderBy": "timestamp asc",
            "pageSize": 4,
        });
        let entries = entries_all(&sim, &token, query.clone()).await;
        assert_eq!(texts(&entries), expected);
        let ids: std::collections::BTreeSet<&str> = entries
            .iter()
            .map(|entry| entry["insertId"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), entries.len(), "insertIds are unique");
        let first = &entries[0];
        assert_eq!(first["logName"], format!("projects/{PROJECT}/logs/stdout"));
        assert_eq!(first["severity"], "INFO");
        assert_eq!(first["resource"]["type"], "gce_instance");
        assert_eq!(first["resource"]["labels"]["instance_id"], id.to_string());
        assert_eq!(first["resource"]["labels"]["zone"], ZONE);
        assert_eq!(first["resource"]["labels"]["project_id"], PROJECT);
        let timestamp = first["timestamp"].as_str().unwrap();
        assert!(
            timestamp.ends_with('Z') && timestamp.len() == 30,
            "{timestamp}"
        );
        assert!(first["receiveTimestamp"].as_str().unwrap() > timestamp);
        assert_eq!(
            entries[1]["logName"],
            format!("projects/{PROJECT}/logs/stderr")
        );
        assert_eq!(entries[1]["severity"], "ERROR");

        // Newest first, and from a timestamp on (inclusive or not).
        let mut newest = query.clone();
        newest["orderBy"] = json!("timestamp desc");
        newest["pageSize"] = json!(2);
        let (_, page) = entries_list(&sim, Some(&token), newest).await;
        assert_eq!(
            texts(page["entries"].as_array().unwrap()),
            ["line 23", "line 22"]
        );
        assert!(page["nextPageToken"].is_string());
        let shared = entries[5]["timestamp"].as_str().unwrap().to_owned();
        let mut since = query.clone();
        since["filter"] = json!(format!("{filter} AND timestamp>=\"{shared}\""));
        let from = texts(&entries_all(&sim, &token, since.clone()).await);
        assert_eq!(from, expected[5..]);
        since["filter"] = json!(format!("{filter} AND timestamp>\"{shared}\""));
        let after = texts(&entries_all(&sim, &token, since).await);
        assert_eq!(after, expected[8..]);

        // An instance's logs outlive it.
        let (status, _, _) = call(
            reqwest::Method::DELETE,
            format!("{}/instances/web-1", zone_url(&sim)),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(status, 200);
        let kept = texts(&entries_all(&sim, &token, query).await);
        assert_eq!(kept, expected);
    }

    #[tokio::test]
    async fn entries_list_refuses_as_cloud_logging_does() {
        let sim = simulator().await;
        let token = logging_token(&sim).await;
        let project = format!("projects/{PROJECT}");
        let ok = json!({"resourceNames": [project], "filter": "resource.type=\"gce_instance\""});
        let (status, body) = entries_list(&sim, Some(&token), ok.clone()).await;
        assert_eq!((status, body), (200, json!({})));

        for (field, value) in [
            ("filter", json!("severity>=ERROR")),
            ("orderBy", json!("insertId asc")),
            ("pageSize", json!(1001)),
            ("pageToken", json!("bm9wZQ")),
            ("resourceNames", json!([])),
        ] {
            let mut bad = ok.clone();
            bad[field] = value;
            let (status, body) = entries_list(&sim, Some(&token), bad).await;
            assert_eq!(status, 400, "{field}: {body}");
            assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
        }
        let mut elsewhere = ok.clone();
        elsewhere["resourceNames"] = json!(["projects/someone-elses"]);
        let (status, body) = entries_list(&sim, Some(&token), elsewhere).await;
        assert_eq!(
            (status, &body["error"]["status"]),
            (403, &json!("PERMISSION_DENIED"))
        );

        let (status, body) = entries_list(&sim, None, ok.clone()).await;
        assert_eq!(
            (status, &body["error"]["status"]),
            (401, &json!("UNAUTHENTICATED"))
        );
        let (status, _) = entries_list(&sim, Some("ya29.nope"), ok.clone()).await;
        assert_eq!(status, 401);
        // A token for Compute only may not read logs.
        let compute_only = access_token(&sim).await;
        let (status, body) = entries_list(&sim, Some(&compute_only), ok.clone()).await;
        assert_eq!(status, 403);
        assert_eq!(
            body["error"]["details"][0]["reason"],
            "ACCESS_TOKEN_SCOPE_INSUFFICIENT"
        );

        sim.faults.set(FaultState {
            suspended: true,
            ..FaultState::default()
        });
        let (status, body) = entries_list(&sim, Some(&token), ok.clone()).await;
        assert_eq!(status, 403);
        assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
        assert_eq!(body["error"]["details"][0]["reason"], "CONSUMER_SUSPENDED");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("suspended")
        );
        sim.faults.set(FaultState {
            rate_limited_secs: Some(9),
            ..FaultState::default()
        });
        let (status, body) = entries_list(&sim, Some(&token), ok.clone()).await;
        assert_eq!(
            (status, &body["error"]["status"]),
            (429, &json!("RESOURCE_EXHAUSTED"))
        );
        sim.faults.set(FaultState {
            failing: true,
            ..FaultState::default()
        });
        let (status, body) = entries_list(&sim, Some(&token), ok.clone()).await;
        assert_eq!(
            (status, &body["error"]["status"]),
            (503, &json!("UNAVAILABLE"))
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000+00:00");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(1_709_210_096_789)),
            "2024-02-29T12:34:56.789+00:00"
        );
        assert!(zone_valid("us-central1-a") && zone_valid("europe-west4-b"));
        assert!(!zone_valid("us-central1") && !zone_valid("mars") && !zone_valid("US-central1-a"));
        assert!(gce_name_valid("web-1") && !gce_name_valid("1web") && !gce_name_valid("web-"));
        assert!(machine_type_known("e2-small") && machine_type_known("n2-standard-4"));
        assert!(!machine_type_known("e2-huge") && !machine_type_known("n2-standard-0"));
        assert_eq!(
            machine_type_name(
                "p",
                "us-central1-a",
                "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/machineTypes/e2-small"
            ),
            Ok("e2-small".to_owned())
        );
        assert!(
            machine_type_name(
                "p",
                "us-central1-a",
                "zones/us-east1-b/machineTypes/e2-small"
            )
            .is_err()
        );
    }
}
