//! The `gcp` provider plugin: Bulkhead's instances as Compute Engine VM instances in one Google
//! Cloud project, reached with a service account's key over the Compute Engine v1 REST API.
//!
//! Configuration:
//!
//! | key | default | |
//! | --- | --- | --- |
//! | `project` | required | the project id |
//! | `regions` | `us-central1-a` | comma-separated **zones** instances may be placed in |
//! | `compute_endpoint` | `https://compute.googleapis.com` | |
//! | `logging_endpoint` | `https://logging.googleapis.com` | Cloud Logging, for `logs` |
//! | `token_uri` | `https://oauth2.googleapis.com/token` | as in the service-account key |
//! | `machine_type` | chosen by size | a name, or a `zones/…/machineTypes/…` URL: every instance on it |
//! | `source_image` | `projects/cos-cloud/global/images/family/cos-stable` | the boot disk's image |
//! | `network` | `global/networks/default` | |
//!
//! Secrets: `client_email` and `private_key` (PKCS#8 PEM, as in a service-account JSON key;
//! PKCS#1 and `\n`-escaped PEM are accepted too), and optionally `private_key_id` (sent as the
//! assertion's `kid`).
//!
//! Authentication is OAuth 2.0's JWT-bearer grant: an RS256-signed assertion (`iss` the
//! account, `scope` Compute and `logging.read`, `aud` the token URI, valid an hour) is
//! exchanged at `token_uri` for an access token, sent as a bearer token.
//!
//! Capability `logs`: an instance's output is read from Cloud Logging ([`logs`]): the entries
//! of its `gce_instance` resource, the logs `stdout` and `stderr` as the workload's streams,
//! with cursors that neither repeat nor lose entries that share a timestamp.
//!
//! Sizes (contract 0.7.0): each instance gets the cheapest E2 machine type that holds the
//! spec's size ([`MACHINE_TYPES`], its vCPUs and memory at least the size's), named in the
//! instance's `machine-type`; a size no type holds is `invalid-spec`. A configured
//! `machine_type` is used for every instance instead (a size it may not hold is the operator's
//! choice).
//!
//! Instances are named after their instance key and labelled `bulkhead-managed=true` and
//! `bulkhead-key=KEY` (plus the spec's labels, sanitised to GCP's label rules); the workload's
//! port, artifact and environment are metadata items (`bulkhead-port`, `bulkhead-artifact`,
//! `bulkhead-env-NAME`). Provisioning is idempotent: a 409 `alreadyExists` on insert returns
//! the instance already there. Only instances labelled with the key are described or deleted.
//!
//! Google's errors are mapped to the contract's (Compute's and Cloud Logging's alike): a
//! suspended project or consumer, or a disabled account or billing → `account-suspended`; other 401/403 → `unauthorized`; `quotaExceeded` →
//! `quota-exceeded`; 429 / `rateLimitExceeded` / `RESOURCE_EXHAUSTED` → `rate-limited`
//! (`Retry-After`, default 5 s); 404 → `not-found`; 400 → `invalid-spec`; 5xx → `unavailable`.
//! The private key, assertions and access tokens never appear in errors or logs.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bulkhead_sdk::http::{Request, Response, form_encode};
use bulkhead_sdk::{
    ConfigKey, HealthReport, HealthStatus, Instance, InstanceSize, InstanceSpec, InstanceState,
    LogPage, LogRequest, Provider, ProviderError, ProviderInfo, RateLimit, WorkloadHealth,
};
mod logs;

use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::sha2::Sha256;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub struct Gcp;

/// The OAuth scope of the Compute Engine API.
pub const COMPUTE_SCOPE: &str = "https://www.googleapis.com/auth/compute";
/// The OAuth scope that reads Cloud Logging (for `logs`).
pub const LOGGING_READ_SCOPE: &str = "https://www.googleapis.com/auth/logging.read";
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const DEFAULT_ZONE: &str = "us-central1-a";
const DEFAULT_COMPUTE_ENDPOINT: &str = "https://compute.googleapis.com";
const DEFAULT_LOGGING_ENDPOINT: &str = "https://logging.googleapis.com";
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The machine types an instance may get, cheapest first (on-demand prices of us-central1):
/// name, CPU in thousandths of a vCPU (the shared-core types at their sustained share), memory
/// in MiB. Every zone of Compute Engine offers the E2 types.
pub const MACHINE_TYPES: &[(&str, u32, u32)] = &[
    ("e2-micro", 250, 1024),
    ("e2-small", 500, 2048),
    ("e2-medium", 1000, 4096),
    ("e2-highcpu-2", 2000, 2048),
    ("e2-standard-2", 2000, 8192),
    ("e2-highmem-2", 2000, 16384),
    ("e2-highcpu-4", 4000, 4096),
    ("e2-standard-4", 4000, 16384),
    ("e2-highmem-4", 4000, 32768),
    ("e2-highcpu-8", 8000, 8192),
    ("e2-standard-8", 8000, 32768),
    ("e2-highmem-8", 8000, 65536),
    ("e2-highcpu-16", 16000, 16384),
    ("e2-standard-16", 16000, 65536),
    ("e2-highmem-16", 16000, 131072),
    ("e2-highcpu-32", 32000, 32768),
    ("e2-standard-32", 32000, 131072),
];

/// The cheapest machine type that holds `size`; `invalid-spec` when none does.
pub fn machine_type_for(size: &InstanceSize) -> Result<&'static str, ProviderError> {
    size.fitting(MACHINE_TYPES).ok_or_else(|| {
        ProviderError::InvalidSpec(format!(
            "no machine type of this provider holds {}m CPU and {} MiB (the largest are \
                 e2-standard-32: 32 vCPUs, 128 GiB, and e2-highmem-16: 16 vCPUs, 128 GiB)",
            size.cpu_millis, size.memory_mib
        ))
    })
}

const DEFAULT_SOURCE_IMAGE: &str = "projects/cos-cloud/global/images/family/cos-stable";
const DEFAULT_NETWORK: &str = "global/networks/default";
/// The lifetime asked for in an assertion (Google's maximum).
const ASSERTION_LIFETIME_SECS: u64 = 3600;
/// A cached token is renewed this long before it expires.
const TOKEN_RENEW_MARGIN_SECS: u64 = 60;
/// When a 429 says nothing about when to come back.
const DEFAULT_RETRY_AFTER_SECS: u32 = 5;
/// The port of an instance whose metadata does not say (as the simulator assumes too).
const DEFAULT_PORT: u16 = 8080;
/// Labels every instance made by Bulkhead carries.
const LABEL_MANAGED: &str = "bulkhead-managed";
const LABEL_KEY: &str = "bulkhead-key";
/// Metadata items of the workload.
const METADATA_PORT: &str = "bulkhead-port";
const METADATA_ARTIFACT: &str = "bulkhead-artifact";
const METADATA_ENV_PREFIX: &str = "bulkhead-env-";
/// GCP's limits.
const MAX_LABELS: usize = 64;
const MAX_LABEL_LEN: usize = 63;
const MAX_METADATA_KEY_LEN: usize = 128;
/// Pages of an aggregated list followed at most (500 instances each).
const MAX_LIST_PAGES: usize = 50;

/// The plugin's configuration.
#[derive(Debug, Clone)]
struct Settings {
    project: String,
    zones: Vec<String>,
    compute_endpoint: String,
    logging_endpoint: String,
    token_uri: String,
    /// Every instance on this type, whatever its size; none: chosen by size.
    machine_type: Option<String>,
    source_image: String,
    network: String,
}

fn config_or(key: &str, default: &str) -> String {
    bulkhead_sdk::config(key)
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// The configured zones (`regions`), or the default one.
fn zones() -> Vec<String> {
    bulkhead_sdk::config_list("regions", &[DEFAULT_ZONE])
}

impl Settings {
    fn load() -> Result<Settings, ProviderError> {
        let project = config_or("project", "");
        if project.is_empty() {
            return Err(ProviderError::InvalidSpec(
                "the configuration `project` (the Google Cloud project id) is not set".into(),
            ));
        }
        Ok(Settings {
            project,
            zones: zones(),
            compute_endpoint: config_or("compute_endpoint", DEFAULT_COMPUTE_ENDPOINT)
                .trim_end_matches('/')
                .to_owned(),
            logging_endpoint: config_or("logging_endpoint", DEFAULT_LOGGING_ENDPOINT)
                .trim_end_matches('/')
                .to_owned(),
            token_uri: config_or("token_uri", DEFAULT_TOKEN_URI),
            machine_type: Some(config_or("machine_type", "")).filter(|name| !name.is_empty()),
            source_image: config_or("source_image", DEFAULT_SOURCE_IMAGE),
            network: config_or("network", DEFAULT_NETWORK),
        })
    }
}

/// An access token and when it expires (Unix seconds).
struct AccessToken {
    value: String,
    expires_at: u64,
}

/// The key of the access token in the provider's cache.
const TOKEN_CACHE_KEY: &str = "gcp:access-token";

impl AccessToken {
    /// The token in the provider's cache (`EXPIRES_AT:TOKEN`), if any.
    fn cached() -> Option<AccessToken> {
        let text = bulkhead_sdk::cache::get_string(TOKEN_CACHE_KEY)?;
        let (expires_at, value) = text.split_once(':')?;
        Some(AccessToken {
            value: value.to_owned(),
            expires_at: expires_at.parse().ok()?,
        })
    }

    /// Keeps the token in the provider's cache until shortly before it expires. A refusal
    /// (too large) only costs the next call an exchange.
    fn cache(&self, now: u64) {
        let ttl = self
            .expires_at
            .saturating_sub(now + TOKEN_RENEW_MARGIN_SECS);
        if ttl > 0 {
            let entry = format!("{}:{}", self.expires_at, self.value);
            if let Err(why) = bulkhead_sdk::cache::set(
                TOKEN_CACHE_KEY,
                entry.as_bytes(),
                std::time::Duration::from_secs(ttl),
            ) {
                bulkhead_sdk::warn!("the access token was not cached: {why}");
            }
        }
    }
}

/// The Compute API as one call sees it: the settings and an access token.
///
/// The token is kept in Bulkhead's cache of this provider (contract 0.3.0) until shortly before
/// it expires, so one assertion is signed and exchanged per token lifetime (an hour), not per
/// call; within a call it is also kept in this value. Bulkhead empties the cache when the
/// provider's secrets or configuration change, so a new key never meets an old token.
struct Client {
    settings: Settings,
    token: RefCell<Option<AccessToken>>,
    /// Tokens exchanged by this call.
    exchanges: std::cell::Cell<u32>,
}

impl Client {
    fn new() -> Result<Client, ProviderError> {
        Ok(Client {
            settings: Settings::load()?,
            token: RefCell::new(None),
            exchanges: std::cell::Cell::new(0),
        })
    }

    /// `{compute_endpoint}/compute/v1/projects/{project}/{path}`.
    fn url(&self, path: &str) -> String {
        format!(
            "{}/compute/v1/projects/{}/{path}",
            self.settings.compute_endpoint, self.settings.project
        )
    }

    /// The access token: this call's, the provider's cached one, or a new exchange (renewed
    /// when about to expire).
    fn token(&self) -> Result<String, ProviderError> {
        let now = unix_now();
        let fresh = |token: &AccessToken| token.expires_at > now + TOKEN_RENEW_MARGIN_SECS;
        if let Some(token) = self.token.borrow().as_ref().filter(|token| fresh(token)) {
            return Ok(token.value.clone());
        }
        let token = match AccessToken::cached().filter(|token| fresh(token)) {
            Some(token) => token,
            None => {
                let token = self.exchange(now)?;
                self.exchanges.set(self.exchanges.get() + 1);
                token.cache(now);
                token
            }
        };
        let value = token.value.clone();
        *self.token.borrow_mut() = Some(token);
        Ok(value)
    }

    /// Signs an assertion and exchanges it at the token endpoint.
    fn exchange(&self, now: u64) -> Result<AccessToken, ProviderError> {
        let client_email = secret_required("client_email")?;
        let private_key = secret_required("private_key")?;
        let key_id = bulkhead_sdk::secret("private_key_id").filter(|id| !id.trim().is_empty());
        let assertion = sign_assertion(
            &client_email,
            &private_key,
            key_id.as_deref(),
            &self.settings.token_uri,
            now,
        )?;
        let response = Request::post(&self.settings.token_uri)
            .header("accept", "application/json")
            .form(&[("grant_type", JWT_BEARER_GRANT), ("assertion", &assertion)])
            .send()?;
        if !(200..300).contains(&response.status) {
            return Err(token_error(&response, &assertion));
        }
        #[derive(Deserialize)]
        struct TokenResponse {
            access_token: String,
            expires_in: Option<u64>,
        }
        // Not `Response::json`: its error quotes the body, which holds the token.
        let answer: TokenResponse = serde_json::from_slice(&response.body).map_err(|err| {
            ProviderError::Internal(format!(
                "the token endpoint answered HTTP {} with an unexpected body ({})",
                response.status,
                json_error(&err)
            ))
        })?;
        bulkhead_sdk::debug!("exchanged a token assertion of {client_email}");
        Ok(AccessToken {
            value: answer.access_token,
            expires_at: now + answer.expires_in.unwrap_or(ASSERTION_LIFETIME_SECS),
        })
    }

    /// Sends `request` with the call's bearer token. Error statuses are the caller's to map.
    ///
    /// A 401 with a token from an earlier call (revoked, or expired early) drops it from the
    /// cache and retries once with a new one: only a fresh token's 401 is the answer.
    fn send(&self, request: Request) -> Result<Response, ProviderError> {
        let send = |request: Request, token: &str| {
            request
                .bearer(token)
                .header("accept", "application/json")
                .send()
        };
        let exchanges_before = self.exchanges.get();
        let response = send(request.clone(), &self.token()?)?;
        if response.status != 401 || self.exchanges.get() != exchanges_before {
            return Ok(response);
        }
        bulkhead_sdk::debug!("a cached access token was refused; exchanging a new one");
        let _ = bulkhead_sdk::cache::set(TOKEN_CACHE_KEY, b"", std::time::Duration::ZERO);
        *self.token.borrow_mut() = None;
        Ok(send(request, &self.token()?)?)
    }

    /// The instance `name` in `zone`, or `None` when there is none.
    fn instance_get(&self, zone: &str, name: &str) -> Result<Option<GceInstance>, ProviderError> {
        let what = format!("reading instance `{name}` in {zone}");
        let response = self.send(Request::get(
            self.url(&format!("zones/{zone}/instances/{name}")),
        ))?;
        match response.status {
            200..=299 => parse(&response, &what).map(Some),
            404 => Ok(None),
            _ => Err(api_error(&what, &response)),
        }
    }
}

fn secret_required(key: &str) -> Result<String, ProviderError> {
    bulkhead_sdk::secret(key)
        .filter(|value| !value.trim().is_empty())
        .ok_or_else(|| {
            ProviderError::Unauthorized(format!(
                "the secret `{key}` (from the service account's JSON key) is not set"
            ))
        })
}

// ---------------------------------------------------------------------------------------------
// The assertion.

fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Reads the PEM private key of a service account: PKCS#8 as Google issues it, or PKCS#1,
/// with real newlines or `\n` escapes (as when copied out of the JSON key).
fn private_key_parse(pem: &str) -> Result<rsa::PrivateKey, ProviderError> {
    let pem = pem.trim().replace("\\n", "\n");
    rsa::PrivateKey::from_pkcs8_pem(&pem)
        .or_else(|_| rsa::PrivateKey::from_pkcs1_pem(&pem))
        .map_err(|_| {
            ProviderError::Unauthorized(
                "the secret `private_key` is not an RSA private key in PEM form (PKCS#8, as in \
                 a service-account JSON key)"
                    .into(),
            )
        })
}

/// The JWT a service account presents to the token endpoint, signed RS256.
fn sign_assertion(
    client_email: &str,
    private_key_pem: &str,
    key_id: Option<&str>,
    token_uri: &str,
    now: u64,
) -> Result<String, ProviderError> {
    let key = private_key_parse(private_key_pem)?;
    let mut header = json!({"alg": "RS256", "typ": "JWT"});
    if let Some(key_id) = key_id {
        header["kid"] = json!(key_id.trim());
    }
    let claims = json!({
        "iss": client_email,
        "scope": format!("{COMPUTE_SCOPE} {LOGGING_READ_SCOPE}"),
        "aud": token_uri,
        "iat": now,
        "exp": now + ASSERTION_LIFETIME_SECS,
    });
    let input = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
    let signature = key
        .pkcs1v15_sign::<Sha256>(input.as_bytes())
        .map_err(|_| ProviderError::Internal("signing the token assertion failed".into()))?;
    Ok(format!("{input}.{}", b64(signature)))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

// ---------------------------------------------------------------------------------------------
// Google's errors.

/// `{"error":"invalid_grant","error_description":"..."}` of the token endpoint.
#[derive(Debug, Default, Deserialize)]
struct OAuthError {
    #[serde(default)]
    error: String,
    #[serde(default)]
    error_description: String,
}

/// `{"error":{"code","message","status","errors":[{"reason","message"}],"details":[...]}}`.
#[derive(Debug, Default, Deserialize)]
struct GoogleErrorBody {
    #[serde(default)]
    error: GoogleError,
}

#[derive(Debug, Default, Deserialize)]
struct GoogleError {
    #[serde(default)]
    message: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    errors: Vec<GoogleErrorItem>,
    #[serde(default)]
    details: Vec<GoogleErrorItem>,
}

#[derive(Debug, Default, Deserialize)]
struct GoogleErrorItem {
    #[serde(default)]
    reason: String,
}

/// `rateLimitExceeded`, `RATE_LIMIT_EXCEEDED` → `ratelimitexceeded`.
fn normalise(reason: &str) -> String {
    reason
        .chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

fn says_suspended(text: &str) -> bool {
    let text = text.to_lowercase();
    text.contains("suspended") || text.contains("disabled")
}

fn rate_limited(response: &Response, message: String) -> ProviderError {
    ProviderError::RateLimited(RateLimit {
        retry_after_secs: response
            .retry_after_secs()
            .unwrap_or(DEFAULT_RETRY_AFTER_SECS),
        message,
    })
}

/// At most `limit` characters of `text`.
fn excerpt(text: &str, limit: usize) -> String {
    text.chars().take(limit).collect()
}

/// The contract error of a refusal by the token endpoint. `assertion` is scrubbed from the
/// message should the endpoint echo it.
fn token_error(response: &Response, assertion: &str) -> ProviderError {
    let parsed: OAuthError = serde_json::from_slice(&response.body).unwrap_or_default();
    // Scrubbed before it is cut short, so that no part of the assertion is left.
    let scrub = |text: &str| excerpt(&text.replace(assertion, "[assertion]"), 300);
    let detail = if parsed.error.is_empty() {
        format!("HTTP {}", response.status)
    } else {
        format!(
            "HTTP {}: {}: {}",
            response.status,
            scrub(&parsed.error),
            scrub(&parsed.error_description)
        )
    };
    let message = format!("the token endpoint refused the service account: {detail}");
    match response.status {
        429 => rate_limited(response, message),
        500..=599 => ProviderError::Unavailable(message),
        _ if says_suspended(&parsed.error_description) => ProviderError::AccountSuspended(message),
        400 | 401 | 403 => ProviderError::Unauthorized(message),
        _ => ProviderError::Internal(message),
    }
}

/// The contract error of a Compute API answer that is not a success, `what` saying what was
/// being done.
fn api_error(what: &str, response: &Response) -> ProviderError {
    let parsed: GoogleErrorBody = serde_json::from_slice(&response.body).unwrap_or_default();
    let error = parsed.error;
    let reasons: Vec<String> = error
        .errors
        .iter()
        .chain(&error.details)
        .map(|item| normalise(&item.reason))
        .filter(|reason| !reason.is_empty())
        .collect();
    let has = |reason: &str| reasons.iter().any(|seen| seen == reason);
    let first_reason = error
        .errors
        .first()
        .map(|item| item.reason.as_str())
        .unwrap_or_default();
    let said = if error.message.is_empty() {
        excerpt(&response.text(), 300)
    } else {
        excerpt(&error.message, 500)
    };
    let message = if first_reason.is_empty() {
        format!("{what}: HTTP {}: {said}", response.status)
    } else {
        format!("{what}: HTTP {} {first_reason}: {said}", response.status)
    };
    let status = normalise(&error.status);
    let refused = matches!(response.status, 401 | 403);
    let billing_off = said.to_lowercase().contains("billing")
        && (said.to_lowercase().contains("disabled") || said.to_lowercase().contains("enable"));
    if has("projectsuspended")
        || has("consumersuspended")
        || has("accountdisabled")
        || has("billingdisabled")
        || (refused && billing_off)
    {
        ProviderError::AccountSuspended(message)
    } else if has("accessnotconfigured") || has("servicedisabled") {
        // The Compute API is not enabled on the project: the operator's to fix.
        ProviderError::Unauthorized(message)
    } else if refused && says_suspended(&said) {
        ProviderError::AccountSuspended(message)
    } else if has("quotaexceeded") {
        ProviderError::QuotaExceeded(message)
    } else if response.status == 429
        || has("ratelimitexceeded")
        || has("userratelimitexceeded")
        || status == "resourceexhausted"
    {
        rate_limited(response, message)
    } else if refused {
        ProviderError::Unauthorized(message)
    } else if response.status == 404 {
        ProviderError::NotFound(message)
    } else if matches!(response.status, 400 | 422) {
        ProviderError::InvalidSpec(message)
    } else if (500..600).contains(&response.status) {
        ProviderError::Unavailable(message)
    } else {
        ProviderError::Internal(message)
    }
}

/// The first reason of a Google error body, if it has one.
fn error_reason(response: &Response) -> String {
    serde_json::from_slice::<GoogleErrorBody>(&response.body)
        .ok()
        .and_then(|body| body.error.errors.into_iter().next())
        .map(|item| item.reason)
        .unwrap_or_default()
}

/// What a serde error says, without quoting the document (which may hold secrets).
fn json_error(err: &serde_json::Error) -> String {
    format!(
        "{:?} error at line {} column {}",
        err.classify(),
        err.line(),
        err.column()
    )
}

/// Parses a successful answer. Not `Response::json`, whose error quotes the body: instances
/// carry the workload's environment in their metadata.
fn parse<T: DeserializeOwned>(response: &Response, what: &str) -> Result<T, ProviderError> {
    serde_json::from_slice(&response.body).map_err(|err| {
        ProviderError::Internal(format!(
            "{what}: unexpected answer (HTTP {}): {}",
            response.status,
            json_error(&err)
        ))
    })
}

// ---------------------------------------------------------------------------------------------
// Compute resources.

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GceInstance {
    /// A uint64 as a string in Google's JSON.
    #[serde(default)]
    id: Value,
    #[serde(default)]
    name: String,
    #[serde(default)]
    zone: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    network_interfaces: Vec<NetworkInterface>,
    #[serde(default)]
    metadata: Metadata,
    /// A URL ending in the type's name.
    #[serde(default)]
    machine_type: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetworkInterface {
    #[serde(default, rename = "networkIP")]
    network_ip: String,
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    items: Vec<MetadataItem>,
}

#[derive(Debug, Default, Deserialize)]
struct MetadataItem {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Operation {
    #[serde(default)]
    name: String,
    #[serde(default)]
    target_id: Value,
    #[serde(default)]
    error: Option<OperationErrors>,
}

#[derive(Debug, Default, Deserialize)]
struct OperationErrors {
    #[serde(default)]
    errors: Vec<OperationError>,
}

#[derive(Debug, Default, Deserialize)]
struct OperationError {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AggregatedList {
    #[serde(default)]
    items: BTreeMap<String, ScopedInstances>,
    #[serde(default)]
    next_page_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ScopedInstances {
    #[serde(default)]
    instances: Vec<GceInstance>,
}

#[derive(Debug, Default, Deserialize)]
struct Zone {
    #[serde(default)]
    status: String,
}

/// A numeric id, given as a string or a number.
fn id_text(id: &Value) -> String {
    match id {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        _ => String::new(),
    }
}

/// The last segment of a resource URL (`…/zones/us-central1-a` → `us-central1-a`).
fn last_segment(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

fn state_of(status: &str) -> InstanceState {
    match status {
        "PROVISIONING" | "STAGING" => InstanceState::Pending,
        "RUNNING" => InstanceState::Running,
        "STOPPING" | "SUSPENDING" | "PENDING_STOP" => InstanceState::Stopping,
        "TERMINATED" | "STOPPED" | "SUSPENDED" => InstanceState::Stopped,
        // REPAIRING (Google is recovering it) and anything newer: not usable yet.
        _ => InstanceState::Pending,
    }
}

impl GceInstance {
    fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata
            .items
            .iter()
            .find(|item| item.key == key)
            .map(|item| item.value.as_str())
    }

    /// Whether Bulkhead made this instance for `instance_key`.
    fn made_for(&self, instance_key: &str) -> bool {
        self.labels.get(LABEL_KEY).map(String::as_str) == Some(instance_key)
    }

    fn into_contract(self) -> Instance {
        let port = self
            .metadata(METADATA_PORT)
            .and_then(|port| port.trim().parse::<u16>().ok())
            .unwrap_or(DEFAULT_PORT);
        let address = self
            .network_interfaces
            .first()
            .map(|nic| nic.network_ip.as_str())
            .filter(|ip| !ip.is_empty())
            .map(|ip| format!("{ip}:{port}"));
        Instance {
            instance_key: self
                .labels
                .get(LABEL_KEY)
                .cloned()
                .unwrap_or_else(|| self.name.clone()),
            provider_id: id_text(&self.id),
            region: last_segment(&self.zone).to_owned(),
            state: state_of(&self.status),
            address,
            health: WorkloadHealth::Unchecked,
            detail: None,
            machine_type: Some(last_segment(&self.machine_type).to_owned())
                .filter(|name| !name.is_empty()),
        }
    }
}

/// A resource name as Compute Engine requires: `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`.
fn resource_name_valid(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[bytes.len() - 1] != b'-'
}

/// A label key or value cut to GCP's rules: lowercase letters, digits, `_` and `-`, at most
/// 63 characters (anything else becomes `_`).
fn label_sanitise(text: &str) -> String {
    text.chars()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_LABEL_LEN)
        .collect()
}

/// A label key: sanitised, and starting with a letter as GCP requires.
fn label_key(key: &str) -> Option<String> {
    let key = label_sanitise(key.trim());
    if key.is_empty() {
        return None;
    }
    if key.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some(key)
    } else {
        Some(excerpt(&format!("l-{key}"), MAX_LABEL_LEN))
    }
}

/// The labels of an instance: Bulkhead's own, then the spec's, sanitised (Bulkhead's win, and
/// GCP's limit of 64 holds).
fn labels_for(spec: &InstanceSpec) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
        (LABEL_KEY.to_owned(), spec.instance_key.clone()),
    ]);
    for (key, value) in &spec.labels {
        let Some(key) = label_key(key) else {
            continue;
        };
        if key == LABEL_MANAGED || key == LABEL_KEY {
            continue;
        }
        if labels.len() >= MAX_LABELS && !labels.contains_key(&key) {
            bulkhead_sdk::warn!(
                "instance {}: label `{key}` dropped, GCP allows {MAX_LABELS} labels",
                spec.instance_key
            );
            continue;
        }
        labels.insert(key, label_sanitise(value));
    }
    labels
}

/// The metadata items of an instance: its port, artifact and environment.
fn metadata_for(spec: &InstanceSpec) -> Result<Vec<Value>, ProviderError> {
    let mut items = vec![
        json!({"key": METADATA_PORT, "value": spec.port.to_string()}),
        json!({"key": METADATA_ARTIFACT, "value": spec.artifact}),
    ];
    for (name, value) in &spec.env {
        let key = format!("{METADATA_ENV_PREFIX}{name}");
        let valid = !name.is_empty()
            && key.len() <= MAX_METADATA_KEY_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(ProviderError::InvalidSpec(format!(
                "the environment variable name `{}` cannot be a GCE metadata key (letters, \
                 digits, `_` and `-`, at most {} characters)",
                excerpt(name, 80),
                MAX_METADATA_KEY_LEN - METADATA_ENV_PREFIX.len()
            )));
        }
        items.push(json!({"key": key, "value": value}));
    }
    Ok(items)
}

/// The Instance resource to insert for `spec`.
fn instance_body(settings: &Settings, spec: &InstanceSpec) -> Result<Value, ProviderError> {
    let name = match &settings.machine_type {
        Some(configured) => configured.as_str(),
        None => machine_type_for(&spec.size)?,
    };
    let machine_type = if name.contains('/') {
        name.to_owned()
    } else {
        format!("zones/{}/machineTypes/{name}", spec.region)
    };
    Ok(json!({
        "name": spec.instance_key,
        "machineType": machine_type,
        "labels": labels_for(spec),
        "metadata": {"items": metadata_for(spec)?},
        "disks": [{
            "boot": true,
            "autoDelete": true,
            "initializeParams": {"sourceImage": settings.source_image},
        }],
        "networkInterfaces": [{"network": settings.network}],
    }))
}

/// The error of a finished operation that failed.
fn operation_error(what: &str, errors: &OperationErrors) -> ProviderError {
    let message = errors
        .errors
        .iter()
        .map(|error| format!("{}: {}", error.code, excerpt(&error.message, 300)))
        .collect::<Vec<_>>()
        .join("; ");
    let message = format!("{what}: the operation failed: {message}");
    let quota = errors.errors.iter().any(|error| {
        error.code == "QUOTA_EXCEEDED" || error.code.starts_with("ZONE_RESOURCE_POOL_EXHAUSTED")
    });
    if quota {
        ProviderError::QuotaExceeded(message)
    } else {
        ProviderError::Internal(message)
    }
}

impl Provider for Gcp {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "gcp".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: zones(),
            capabilities: vec!["logs".into()],
            config: vec![
                ConfigKey::required("project", "The Google Cloud project id"),
                ConfigKey::optional("regions", "Comma-separated zones (default us-central1-a)"),
                ConfigKey::optional("compute_endpoint", "Default https://compute.googleapis.com"),
                ConfigKey::optional(
                    "logging_endpoint",
                    "Cloud Logging, for logs (default https://logging.googleapis.com)",
                ),
                ConfigKey::optional("token_uri", "Default https://oauth2.googleapis.com/token"),
                ConfigKey::optional(
                    "machine_type",
                    "Every instance on this type (default: the cheapest E2 type that holds its size)",
                ),
                ConfigKey::optional("source_image", "The boot disk's image (default COS stable)"),
                ConfigKey::optional("network", "Default global/networks/default"),
                ConfigKey::secret("client_email", "The service account's email"),
                ConfigKey::secret("private_key", "The service account's private key (PEM)"),
                ConfigKey {
                    required: false,
                    ..ConfigKey::secret("private_key_id", "The key's id (sent as `kid`)")
                },
            ],
        }
    }

    /// Reads the first zone: this checks the credentials, the project and the API at once.
    fn health() -> Result<HealthReport, ProviderError> {
        let client = Client::new()?;
        let zone = client.settings.zones[0].clone();
        let what = format!("reading zone {zone}");
        let response = client.send(Request::get(client.url(&format!("zones/{zone}"))))?;
        if !(200..300).contains(&response.status) {
            return Err(api_error(&what, &response));
        }
        let found: Zone = parse(&response, &what)?;
        let status = if found.status == "UP" {
            HealthStatus::Healthy
        } else {
            HealthStatus::Degraded
        };
        Ok(HealthReport {
            status,
            message: format!(
                "project {}: zone {zone} is {}",
                client.settings.project,
                if found.status.is_empty() {
                    "reachable"
                } else {
                    found.status.as_str()
                }
            ),
        })
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        let client = Client::new()?;
        if !client.settings.zones.contains(&spec.region) {
            return Err(ProviderError::InvalidSpec(format!(
                "`{}` is not one of this provider's zones ({})",
                spec.region,
                client.settings.zones.join(", ")
            )));
        }
        if !resource_name_valid(&spec.instance_key) {
            return Err(ProviderError::InvalidSpec(format!(
                "`{}` cannot name a Compute Engine instance",
                spec.instance_key
            )));
        }
        let key = spec.instance_key.clone();
        let zone = spec.region.clone();
        let body = instance_body(&client.settings, &spec)?;
        let chosen = body["machineType"]
            .as_str()
            .map(|url| last_segment(url).to_owned());
        let what = format!("inserting instance `{key}` in {zone}");
        let response = client
            .send(Request::post(client.url(&format!("zones/{zone}/instances"))).json(&body))?;
        let mut target_id = String::new();
        match response.status {
            200..=299 => {
                let operation: Operation = parse(&response, &what)?;
                if let Some(errors) = &operation.error
                    && !errors.errors.is_empty()
                {
                    return Err(operation_error(&what, errors));
                }
                target_id = id_text(&operation.target_id);
                bulkhead_sdk::info!("inserted instance {key} in {zone} ({})", operation.name);
            }
            409 if error_reason(&response) == "alreadyExists" => {
                bulkhead_sdk::info!("instance {key} already exists in {zone}: returning it");
            }
            _ => return Err(api_error(&what, &response)),
        }
        match client.instance_get(&zone, &key)? {
            Some(found) if found.made_for(&key) => Ok(found.into_contract()),
            Some(_) => Err(ProviderError::InvalidSpec(format!(
                "an instance named `{key}` that Bulkhead did not make already exists in {zone}"
            ))),
            // Inserted, but not readable yet: it is being created.
            None => Ok(Instance {
                instance_key: key,
                provider_id: target_id,
                region: zone,
                state: InstanceState::Pending,
                address: None,
                health: WorkloadHealth::Unchecked,
                detail: None,
                machine_type: chosen,
            }),
        }
    }

    /// Deletes the instance of the key in every configured zone; never one Bulkhead did not
    /// make (read first: instance names are not reserved to Bulkhead in a project).
    fn deprovision(instance_key: String) -> Result<(), ProviderError> {
        let client = Client::new()?;
        for zone in &client.settings.zones {
            match client.instance_get(zone, &instance_key)? {
                None => continue,
                Some(found) if !found.made_for(&instance_key) => {
                    bulkhead_sdk::warn!(
                        "not deleting instance {instance_key} in {zone}: Bulkhead did not make it"
                    );
                    continue;
                }
                Some(_) => {}
            }
            let what = format!("deleting instance `{instance_key}` in {zone}");
            let response = client.send(Request::delete(
                client.url(&format!("zones/{zone}/instances/{instance_key}")),
            ))?;
            match response.status {
                200..=299 => {
                    let operation: Operation = parse(&response, &what)?;
                    if let Some(errors) = &operation.error
                        && !errors.errors.is_empty()
                    {
                        return Err(operation_error(&what, errors));
                    }
                    bulkhead_sdk::info!(
                        "deleting instance {instance_key} in {zone} ({})",
                        operation.name
                    );
                }
                404 => {}
                _ => return Err(api_error(&what, &response)),
            }
        }
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        let client = Client::new()?;
        for zone in &client.settings.zones {
            if let Some(found) = client.instance_get(zone, &instance_key)?
                && found.made_for(&instance_key)
            {
                return Ok(found.into_contract());
            }
        }
        Err(ProviderError::NotFound(format!(
            "no instance `{instance_key}` in {}",
            client.settings.zones.join(", ")
        )))
    }

    /// A page of the instance's output, from Cloud Logging ([`logs`]).
    fn logs(instance_key: String, request: LogRequest) -> Result<LogPage, ProviderError> {
        logs::logs(&instance_key, &request)
    }

    /// Every instance labelled `bulkhead-managed=true`, in any zone of the project.
    fn list() -> Result<Vec<Instance>, ProviderError> {
        let client = Client::new()?;
        let filter = form_encode(&format!("labels.{LABEL_MANAGED}=true"));
        let mut instances = Vec::new();
        let mut page_token: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let mut url = client.url(&format!(
                "aggregated/instances?filter={filter}&maxResults=500"
            ));
            if let Some(token) = &page_token {
                url.push_str(&format!("&pageToken={}", form_encode(token)));
            }
            let what = "listing instances";
            let response = client.send(Request::get(url))?;
            if !(200..300).contains(&response.status) {
                return Err(api_error(what, &response));
            }
            let page: AggregatedList = parse(&response, what)?;
            for scope in page.items.into_values() {
                instances.extend(scope.instances.into_iter().map(GceInstance::into_contract));
            }
            match page.next_page_token.filter(|token| !token.is_empty()) {
                Some(token) => page_token = Some(token),
                None => return Ok(instances),
            }
        }
        Err(ProviderError::Internal(format!(
            "listing instances: more than {MAX_LIST_PAGES} pages"
        )))
    }
}

bulkhead_sdk::export_provider!(Gcp);

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use bulkhead_sdk::http::{Method, Response};
    use bulkhead_sdk::testing;
    use rsa::pkcs8::DecodePrivateKey;

    use super::*;

    /// A throwaway RSA-2048 key made for these tests only (`openssl genpkey`); it grants
    /// nothing anywhere.
    const TEST_KEY: &str = include_str!("test-key.pem");
    const EMAIL: &str = "bulkhead@shop-prod.iam.gserviceaccount.com";
    const ENDPOINT: &str = "http://compute.test";
    const LOGGING: &str = "http://logging.test";
    const TOKEN_URI: &str = "http://oauth.test/token";
    const TOKEN: &str = "ya29.test-token";

    /// Whether an error is the one expected.
    type Expect = fn(&ProviderError) -> bool;

    #[test]
    fn the_cheapest_machine_type_that_holds_the_size_is_chosen() {
        let size = |cpu_millis, memory_mib| InstanceSize {
            cpu_millis,
            memory_mib,
        };
        for (cpu, memory, expected) in [
            (10, 16, "e2-micro"),
            (250, 1024, "e2-micro"),
            (500, 512, "e2-small"),
            (251, 512, "e2-small"),
            (1000, 4096, "e2-medium"),
            (1500, 1024, "e2-highcpu-2"),
            (2000, 6000, "e2-standard-2"),
            (1000, 12000, "e2-highmem-2"),
            (8000, 16384, "e2-standard-8"),
            (32000, 131072, "e2-standard-32"),
        ] {
            assert_eq!(
                machine_type_for(&size(cpu, memory)).unwrap(),
                expected,
                "{cpu} {memory}"
            );
        }
        for (cpu, memory) in [(32001, 1024), (1000, 131073)] {
            assert!(matches!(
                machine_type_for(&size(cpu, memory)),
                Err(ProviderError::InvalidSpec(message)) if message.contains("no machine type")
            ));
        }
        // Every type is one Compute Engine has (the simulator refuses the others).
        for (name, cpu_millis, memory_mib) in MACHINE_TYPES {
            assert!(name.starts_with("e2-"), "{name}");
            assert!(*cpu_millis >= 250 && *memory_mib >= 1024, "{name}");
        }
    }

    fn configure() {
        testing::set_config("project", "shop-prod");
        testing::set_config("regions", "us-central1-a, europe-west1-b");
        testing::set_config("compute_endpoint", ENDPOINT);
        testing::set_config("logging_endpoint", LOGGING);
        testing::set_config("token_uri", TOKEN_URI);
        testing::set_secret("client_email", EMAIL);
        testing::set_secret("private_key", TEST_KEY);
    }

    fn spec() -> InstanceSpec {
        InstanceSpec {
            instance_key: "web-1".into(),
            region: "us-central1-a".into(),
            artifact: "shop/web:1".into(),
            port: 8081,
            env: vec![("API_KEY".into(), "s3cret".into())],
            labels: vec![
                ("Team".into(), "Shop Front".into()),
                ("9lives".into(), "x".into()),
                ("bulkhead-key".into(), "hijack".into()),
            ],
            health_check: None,
            source: None,
            size: InstanceSize {
                cpu_millis: 500,
                memory_mib: 512,
            },
        }
    }

    fn instance_json(name: &str, status: &str) -> Value {
        json!({
            "kind": "compute#instance",
            "id": "7425158321839422921",
            "name": name,
            "zone": format!("{ENDPOINT}/compute/v1/projects/shop-prod/zones/us-central1-a"),
            "status": status,
            "labels": {"bulkhead-managed": "true", "bulkhead-key": name},
            "networkInterfaces": [{"networkIP": "10.128.0.7", "name": "nic0"}],
            "metadata": {"items": [
                {"key": "bulkhead-port", "value": "8081"},
                {"key": "bulkhead-env-API_KEY", "value": "s3cret"},
            ]},
        })
    }

    fn google_error(code: u16, status: &str, reason: &str, message: &str) -> Response {
        Response::json_body(
            code,
            &json!({"error": {
                "code": code,
                "message": message,
                "errors": [{"message": message, "domain": "global", "reason": reason}],
                "status": status,
            }}),
        )
    }

    fn token_answer() -> Response {
        Response::json_body(
            200,
            &json!({"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}),
        )
    }

    /// What the fake API saw: (method, url) of each request, token exchanges counted apart.
    #[derive(Default)]
    struct Seen {
        exchanges: usize,
        requests: Vec<(Method, String)>,
        bodies: Vec<Vec<u8>>,
    }

    /// Fakes Google: the token endpoint answers a token; `api` answers Compute requests, whose
    /// bearer token is checked.
    fn fake(mut api: impl FnMut(&Request) -> Response + 'static) -> Rc<RefCell<Seen>> {
        let seen = Rc::new(RefCell::new(Seen::default()));
        let log = seen.clone();
        testing::set_http_handler(move |request| {
            if request.url == TOKEN_URI {
                log.borrow_mut().exchanges += 1;
                return Ok(token_answer());
            }
            // Any other bearer is refused, as Google refuses a revoked or expired token.
            if request.header_value("authorization") != Some(format!("Bearer {TOKEN}").as_str()) {
                return Ok(google_error(
                    401,
                    "UNAUTHENTICATED",
                    "authError",
                    "invalid token",
                ));
            }
            let mut log = log.borrow_mut();
            log.requests.push((request.method, request.url.clone()));
            log.bodies.push(request.body.clone());
            Ok(api(request))
        });
        seen
    }

    fn form_value(body: &[u8], name: &str) -> String {
        let body = String::from_utf8(body.to_vec()).unwrap();
        let raw = body
            .split('&')
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .unwrap();
        // Percent-decoding of the few characters the form encodes here.
        let mut out = Vec::new();
        let bytes = raw.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                out.push(u8::from_str_radix(&raw[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    fn b64_decode(text: &str) -> Vec<u8> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .unwrap()
    }

    #[test]
    fn the_assertion_is_signed_rs256_with_the_right_claims() {
        configure();
        let assertion = Rc::new(RefCell::new(String::new()));
        let captured = assertion.clone();
        testing::set_http_handler(move |request| {
            if request.url == TOKEN_URI {
                assert_eq!(request.method, Method::Post);
                assert_eq!(
                    request.header_value("content-type"),
                    Some("application/x-www-form-urlencoded")
                );
                assert_eq!(form_value(&request.body, "grant_type"), JWT_BEARER_GRANT);
                *captured.borrow_mut() = form_value(&request.body, "assertion");
                return Ok(token_answer());
            }
            Ok(Response::json_body(
                200,
                &json!({"name": "us-central1-a", "status": "UP"}),
            ))
        });
        let report = Gcp::health().unwrap();
        assert_eq!(report.status, HealthStatus::Healthy);
        assert_eq!(
            report.message,
            "project shop-prod: zone us-central1-a is UP"
        );

        let assertion = assertion.borrow().clone();
        let parts: Vec<&str> = assertion.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: Value = serde_json::from_slice(&b64_decode(parts[0])).unwrap();
        assert_eq!(header, json!({"alg": "RS256", "typ": "JWT"}));
        let claims: Value = serde_json::from_slice(&b64_decode(parts[1])).unwrap();
        assert_eq!(claims["iss"], EMAIL);
        assert_eq!(
            claims["scope"],
            format!("{COMPUTE_SCOPE} {LOGGING_READ_SCOPE}")
        );
        assert_eq!(claims["aud"], TOKEN_URI);
        let iat = claims["iat"].as_u64().unwrap();
        assert!(iat.abs_diff(unix_now()) < 60);
        assert_eq!(claims["exp"].as_u64().unwrap(), iat + 3600);
        let public = rsa::PrivateKey::from_pkcs8_pem(TEST_KEY)
            .unwrap()
            .to_public_key();
        let signed = format!("{}.{}", parts[0], parts[1]);
        public
            .pkcs1v15_verify::<Sha256>(signed.as_bytes(), &b64_decode(parts[2]))
            .expect("the signature verifies with the account's public key");
        let mut tampered = signed.clone();
        tampered.push('x');
        assert!(
            public
                .pkcs1v15_verify::<Sha256>(tampered.as_bytes(), &b64_decode(parts[2]))
                .is_err()
        );
    }

    #[test]
    fn keys_are_read_in_every_form_google_hands_out() {
        assert!(private_key_parse(TEST_KEY).is_ok());
        assert!(private_key_parse(&TEST_KEY.replace('\n', "\\n")).is_ok());
        let err = private_key_parse("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")
            .unwrap_err();
        assert!(matches!(&err, ProviderError::Unauthorized(m) if !m.contains("AAAA")));
        let with_kid = sign_assertion(EMAIL, TEST_KEY, Some("abc123"), TOKEN_URI, 1_000).unwrap();
        let header: Value =
            serde_json::from_slice(&b64_decode(with_kid.split('.').next().unwrap())).unwrap();
        assert_eq!(header["kid"], "abc123");
    }

    #[test]
    fn one_token_exchange_per_token_lifetime_sent_as_a_bearer() {
        configure();
        let seen = fake(|request| match request.method {
            Method::Get => Response::json_body(200, &instance_json("web-1", "RUNNING")),
            _ => Response::json_body(200, &json!({"kind": "compute#operation", "name": "op-1"})),
        });
        // Two zones: two reads and two deletes, one exchange.
        Gcp::deprovision("web-1".into()).unwrap();
        assert_eq!(seen.borrow().exchanges, 1);
        assert_eq!(seen.borrow().requests.len(), 4);
        // The next call (a fresh instance in Bulkhead) finds the token in the provider's cache.
        Gcp::describe("web-1".into()).unwrap();
        assert_eq!(seen.borrow().exchanges, 1);
        let cached = bulkhead_sdk::cache::get_string(TOKEN_CACHE_KEY).unwrap();
        assert!(cached.ends_with(TOKEN), "{cached}");
        // Emptied (as when the provider's secrets change): exchanged again.
        testing::cache_clear();
        Gcp::describe("web-1".into()).unwrap();
        assert_eq!(seen.borrow().exchanges, 2);
    }

    #[test]
    fn a_refused_cached_token_is_exchanged_again_once() {
        configure();
        // A token from an earlier call, which the API no longer accepts.
        let expires = unix_now() + 3000;
        bulkhead_sdk::cache::set(
            TOKEN_CACHE_KEY,
            format!("{expires}:revoked").as_bytes(),
            std::time::Duration::from_secs(3000),
        )
        .unwrap();
        let seen = fake(|_| Response::json_body(200, &instance_json("web-1", "RUNNING")));
        Gcp::describe("web-1".into()).unwrap();
        assert_eq!(seen.borrow().exchanges, 1, "the refused token was replaced");
        let cached = bulkhead_sdk::cache::get_string(TOKEN_CACHE_KEY).unwrap();
        assert!(cached.ends_with(TOKEN), "{cached}");
    }

    #[test]
    fn provision_inserts_a_labelled_instance_and_returns_it() {
        configure();
        let seen = fake(|request| match request.method {
            Method::Post => Response::json_body(
                200,
                &json!({"kind": "compute#operation", "name": "operation-1", "status": "DONE",
                        "operationType": "insert", "targetId": "7425158321839422921"}),
            ),
            _ => Response::json_body(200, &instance_json("web-1", "RUNNING")),
        });
        let made = Gcp::provision(spec()).unwrap();
        assert_eq!(made.instance_key, "web-1");
        assert_eq!(made.provider_id, "7425158321839422921");
        assert_eq!(made.region, "us-central1-a");
        assert_eq!(made.state, InstanceState::Running);
        assert_eq!(made.address.as_deref(), Some("10.128.0.7:8081"));

        let seen = seen.borrow();
        assert_eq!(
            seen.requests[0],
            (
                Method::Post,
                format!("{ENDPOINT}/compute/v1/projects/shop-prod/zones/us-central1-a/instances")
            )
        );
        assert_eq!(
            seen.requests[1],
            (
                Method::Get,
                format!(
                    "{ENDPOINT}/compute/v1/projects/shop-prod/zones/us-central1-a/instances/web-1"
                )
            )
        );
        let body: Value = serde_json::from_slice(&seen.bodies[0]).unwrap();
        assert_eq!(body["name"], "web-1");
        assert_eq!(
            body["machineType"],
            "zones/us-central1-a/machineTypes/e2-small"
        );
        assert_eq!(
            body["labels"],
            json!({"bulkhead-managed": "true", "bulkhead-key": "web-1", "team": "shop_front",
                   "l-9lives": "x"})
        );
        assert_eq!(
            body["metadata"]["items"],
            json!([
                {"key": "bulkhead-port", "value": "8081"},
                {"key": "bulkhead-artifact", "value": "shop/web:1"},
                {"key": "bulkhead-env-API_KEY", "value": "s3cret"},
            ])
        );
        assert_eq!(body["disks"][0]["boot"], true);
        assert_eq!(
            body["disks"][0]["initializeParams"]["sourceImage"],
            DEFAULT_SOURCE_IMAGE
        );
        // Nothing secret in the logs.
        for (_, line) in testing::logs_take() {
            assert!(!line.contains("s3cret") && !line.contains(TOKEN), "{line}");
        }
    }

    #[test]
    fn a_conflict_on_insert_returns_the_existing_instance() {
        configure();
        let seen = fake(|request| match request.method {
            Method::Post => google_error(
                409,
                "ALREADY_EXISTS",
                "alreadyExists",
                "The resource 'projects/shop-prod/zones/us-central1-a/instances/web-1' already exists",
            ),
            _ => Response::json_body(200, &instance_json("web-1", "STAGING")),
        });
        let made = Gcp::provision(spec()).unwrap();
        assert_eq!(made.state, InstanceState::Pending);
        assert_eq!(made.provider_id, "7425158321839422921");
        let methods: Vec<Method> = seen.borrow().requests.iter().map(|(m, _)| *m).collect();
        assert_eq!(methods, vec![Method::Post, Method::Get]);

        // A same-named instance Bulkhead did not make is not taken over.
        fake(|request| match request.method {
            Method::Post => google_error(409, "ALREADY_EXISTS", "alreadyExists", "exists"),
            _ => {
                let mut other = instance_json("web-1", "RUNNING");
                other["labels"] = json!({});
                Response::json_body(200, &other)
            }
        });
        assert!(matches!(
            Gcp::provision(spec()),
            Err(ProviderError::InvalidSpec(m)) if m.contains("did not make")
        ));
    }

    #[test]
    fn provision_checks_the_zone_and_name_first() {
        configure();
        let seen = fake(|_| Response::new(500, "unexpected"));
        let mut elsewhere = spec();
        elsewhere.region = "asia-east1-a".into();
        assert!(matches!(
            Gcp::provision(elsewhere),
            Err(ProviderError::InvalidSpec(_))
        ));
        let mut bad_env = spec();
        bad_env.env = vec![("NOT OK".into(), "x".into())];
        assert!(matches!(
            Gcp::provision(bad_env),
            Err(ProviderError::InvalidSpec(_))
        ));
        assert!(seen.borrow().requests.is_empty());
    }

    /// A fake Cloud Logging, written apart from the plugin: entries (timestamp, insertId, log,
    /// text) of the instance, filtered by `timestamp>=`, ordered, paged by offset.
    type FakeLog = Rc<RefCell<Vec<(String, String, String, String)>>>;

    fn fake_logging(log: FakeLog) -> Rc<RefCell<Seen>> {
        fake(move |request| {
            if !request.url.starts_with(LOGGING) {
                return Response::json_body(200, &instance_json("web-1", "RUNNING"));
            }
            assert_eq!(request.url, format!("{LOGGING}/v2/entries:list"));
            let body: Value = serde_json::from_slice(&request.body).unwrap();
            assert_eq!(body["resourceNames"], json!(["projects/shop-prod"]));
            let filter = body["filter"].as_str().unwrap();
            assert!(filter.starts_with(
                "resource.type=\"gce_instance\" AND \
                 resource.labels.instance_id=\"7425158321839422921\""
            ));
            let since = filter
                .split_once("timestamp>=\"")
                .map(|(_, rest)| rest.trim_end_matches('"').to_owned());
            let mut entries: Vec<_> = log
                .borrow()
                .iter()
                .filter(|(time, ..)| since.as_ref().is_none_or(|since| time >= since))
                .cloned()
                .collect();
            entries.sort();
            if body["orderBy"] == "timestamp desc" {
                entries.reverse();
            }
            let size = body["pageSize"].as_u64().unwrap() as usize;
            assert!((1..=1000).contains(&size));
            let start: usize = body["pageToken"].as_str().map_or(0, |t| t.parse().unwrap());
            let page: Vec<Value> = entries
                .iter()
                .skip(start)
                .take(size)
                .map(|(time, id, log, text)| {
                    json!({"timestamp": time, "insertId": id, "textPayload": text,
                           "logName": format!("projects/shop-prod/logs/{log}")})
                })
                .collect();
            let mut answer = json!({"entries": page});
            if start + size < entries.len() {
                answer["nextPageToken"] = json!((start + size).to_string());
            }
            Response::json_body(200, &answer)
        })
    }

    fn entry(second: u32, id: &str, log: &str, text: &str) -> (String, String, String, String) {
        (
            format!("2026-05-01T10:00:{second:02}.000000500Z"),
            id.into(),
            log.into(),
            text.into(),
        )
    }

    /// Every page from `after` on, `max_lines` at a time.
    fn read_all(after: Option<String>, max_lines: u32) -> (Vec<String>, String) {
        let mut texts = Vec::new();
        let mut cursor = after;
        loop {
            let page =
                Gcp::logs("web-1".into(), LogRequest::new(cursor.clone(), max_lines)).unwrap();
            assert!(page.lines.len() <= max_lines as usize);
            assert!(page.next.len() <= 1000);
            if page.lines.is_empty() {
                assert_eq!(Some(&page.next), cursor.as_ref());
                return (texts, page.next);
            }
            texts.extend(page.lines.into_iter().map(|line| line.text));
            cursor = Some(page.next);
        }
    }

    #[test]
    fn logs_page_through_cloud_logging_without_repeats_or_losses() {
        configure();
        testing::cache_clear();
        assert!(Gcp::info().capabilities.contains(&"logs".to_owned()));
        // Lines in threes sharing a timestamp, their insertIds not in printing order.
        let log: FakeLog = Rc::new(RefCell::new(Vec::new()));
        for n in 0..12u32 {
            let stream = if n % 4 == 3 { "stderr" } else { "stdout" };
            let id = format!("{}-{n:02}", ["c", "a", "b"][n as usize % 3]);
            log.borrow_mut()
                .push(entry(n / 3, &id, stream, &format!("line {n}")));
        }
        log.borrow_mut()
            .push(entry(5, "z", "syslog", "kernel says hi"));
        let seen = fake_logging(log.clone());
        // Google's order among equal timestamps is by insertId: a, b, c.
        let ordered = |range: std::ops::Range<u32>| -> Vec<String> {
            let mut lines: Vec<(u32, String, String)> = range
                .map(|n| {
                    (
                        n / 3,
                        ["c", "a", "b"][n as usize % 3].to_owned(),
                        format!("line {n}"),
                    )
                })
                .collect();
            lines.sort();
            lines.into_iter().map(|(.., text)| text).collect()
        };

        // The newest: the last four, oldest first.
        let page = Gcp::logs("web-1".into(), LogRequest::new(None, 4)).unwrap();
        let texts: Vec<&str> = page.lines.iter().map(|line| line.text.as_str()).collect();
        assert_eq!(texts, ["line 10", "line 11", "line 9", "kernel says hi"]);
        use bulkhead_sdk::LogStream::*;
        let streams: Vec<_> = page.lines.iter().map(|line| line.stream).collect();
        assert_eq!(streams, [Stdout, Stderr, Stdout, System]);
        assert_eq!(page.lines[0].time_ms, 1_777_629_603_000);
        assert_eq!(page.next, "g1|2026-05-01T10:00:05.000000500Z|ids:z");
        assert!(!page.gap);
        let bodies = seen.borrow().bodies.clone();
        let asked: Value = serde_json::from_slice(bodies.last().unwrap()).unwrap();
        assert_eq!(asked["orderBy"], "timestamp desc");
        assert_eq!(asked["pageSize"], 4);

        // Nothing new: the same cursor back.
        let (texts, _) = read_all(Some(page.next.clone()), 3);
        assert!(texts.is_empty());
        // New lines, two of them at the cursor's own timestamp.
        log.borrow_mut()
            .push(entry(5, "y", "stdout", "same time, smaller id"));
        log.borrow_mut()
            .push(entry(5, "zz", "stdout", "same time, greater id"));
        log.borrow_mut().push(entry(6, "q", "stdout", "later"));
        let (texts, last) = read_all(Some(page.next), 1);
        assert_eq!(
            texts,
            ["same time, smaller id", "same time, greater id", "later"]
        );
        assert_eq!(last, "g1|2026-05-01T10:00:06.000000500Z|ids:q");

        // From the first line kept, two at a time: every line once, in Google's order.
        let (texts, _) = read_all(Some("g1".into()), 2);
        let mut expected = ordered(0..12);
        expected.extend(
            [
                "same time, smaller id",
                "kernel says hi",
                "same time, greater id",
                "later",
            ]
            .map(str::to_owned),
        );
        assert_eq!(texts, expected);

        // From a time on.
        let since = rfc3339_ms("2026-05-01T10:00:03Z");
        let mut request = LogRequest::new(None, 3);
        request.since_ms = Some(since);
        let page = Gcp::logs("web-1".into(), request).unwrap();
        let texts: Vec<String> = page.lines.into_iter().map(|line| line.text).collect();
        assert_eq!(texts, ordered(9..12));
        let (rest, _) = read_all(Some(page.next), 50);
        assert_eq!(rest.len(), 4);
    }

    fn rfc3339_ms(text: &str) -> u64 {
        (logs::rfc3339_nanos(text).unwrap() / 1_000_000) as u64
    }

    #[test]
    fn logs_respect_the_byte_bound_and_lose_nothing() {
        configure();
        testing::cache_clear();
        let log: FakeLog = Rc::new(RefCell::new(Vec::new()));
        for n in 0..6u32 {
            log.borrow_mut().push(entry(
                n,
                &format!("i{n}"),
                "stdout",
                &"x".repeat(10 + n as usize),
            ));
        }
        fake_logging(log);
        // Newest: what fits 30 bytes, counted from the newest (15 + 14).
        let mut newest = LogRequest::new(None, 10);
        newest.max_bytes = 30;
        let page = Gcp::logs("web-1".into(), newest.clone()).unwrap();
        let sizes: Vec<usize> = page.lines.iter().map(|line| line.text.len()).collect();
        assert_eq!(sizes, [14, 15]);
        // A single line longer than the bound is cut.
        newest.max_bytes = 4;
        let page = Gcp::logs("web-1".into(), newest).unwrap();
        assert_eq!(page.lines.len(), 1);
        assert_eq!(page.lines[0].text, "xxxx");

        // From the start, 25 bytes a page: every line, whole, once.
        let mut cursor = Some("g1".to_owned());
        let mut sizes = Vec::new();
        for _ in 0..10 {
            let mut request = LogRequest::new(cursor.clone(), 10);
            request.max_bytes = 25;
            let page = Gcp::logs("web-1".into(), request).unwrap();
            if page.lines.is_empty() {
                break;
            }
            assert!(page.lines.iter().map(|line| line.text.len()).sum::<usize>() <= 25);
            sizes.extend(page.lines.iter().map(|line| line.text.len()));
            cursor = Some(page.next);
        }
        assert_eq!(sizes, [10, 11, 12, 13, 14, 15]);
    }

    #[test]
    fn logs_errors_map_like_the_other_calls() {
        configure();
        testing::cache_clear();
        let logging_answers = |answer: fn() -> Response| {
            fake(move |request| {
                if request.url.starts_with(LOGGING) {
                    answer()
                } else {
                    Response::json_body(200, &instance_json("web-1", "RUNNING"))
                }
            });
            Gcp::logs("web-1".into(), LogRequest::new(None, 10)).unwrap_err()
        };
        let suspended = logging_answers(|| {
            Response::json_body(
                403,
                &json!({"error": {"code": 403, "status": "PERMISSION_DENIED",
                    "message": "Permission denied: Consumer 'projects/shop-prod' has been suspended.",
                    "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                 "reason": "CONSUMER_SUSPENDED", "domain": "googleapis.com"}]}}),
            )
        });
        assert!(
            matches!(suspended, ProviderError::AccountSuspended(_)),
            "{suspended:?}"
        );
        let unscoped = logging_answers(|| {
            Response::json_body(
                403,
                &json!({"error": {"code": 403, "status": "PERMISSION_DENIED",
                    "message": "Request had insufficient authentication scopes.",
                    "details": [{"reason": "ACCESS_TOKEN_SCOPE_INSUFFICIENT"}]}}),
            )
        });
        assert!(
            matches!(unscoped, ProviderError::Unauthorized(_)),
            "{unscoped:?}"
        );
        let refused = logging_answers(|| {
            Response::json_body(
                401,
                &json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
                "message": "Request had invalid authentication credentials."}}),
            )
        });
        assert!(
            matches!(refused, ProviderError::Unauthorized(_)),
            "{refused:?}"
        );
        let throttled = logging_answers(|| {
            let mut response = Response::json_body(
                429,
                &json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota"}}),
            );
            response.headers.push(("retry-after".into(), "11".into()));
            response
        });
        assert!(
            matches!(&throttled, ProviderError::RateLimited(limit) if limit.retry_after_secs == 11),
            "{throttled:?}"
        );
        let down = logging_answers(|| Response::new(503, "upstream unavailable"));
        assert!(matches!(down, ProviderError::Unavailable(_)), "{down:?}");
        let bad_filter = logging_answers(|| {
            Response::json_body(
                400,
                &json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                "message": "Unparseable filter"}}),
            )
        });
        assert!(
            matches!(bad_filter, ProviderError::InvalidSpec(_)),
            "{bad_filter:?}"
        );

        // No instance: not found, without asking Cloud Logging.
        let seen = fake(|_| google_error(404, "NOT_FOUND", "notFound", "not found"));
        assert!(matches!(
            Gcp::logs("web-9".into(), LogRequest::new(None, 10)),
            Err(ProviderError::NotFound(_))
        ));
        assert!(
            seen.borrow()
                .requests
                .iter()
                .all(|(_, url)| url.starts_with(ENDPOINT))
        );
        assert!(matches!(
            Gcp::logs("web-1".into(), LogRequest::new(Some("7".into()), 10)),
            Err(ProviderError::InvalidSpec(_))
        ));
    }

    #[test]
    fn describe_deprovision_and_list() {
        configure();
        fake(|_| google_error(404, "NOT_FOUND", "notFound", "The resource was not found"));
        assert!(matches!(
            Gcp::describe("web-1".into()),
            Err(ProviderError::NotFound(_))
        ));
        Gcp::deprovision("web-1".into()).unwrap();

        let seen = fake(|request| {
            if request.url.contains("pageToken=2") {
                Response::json_body(
                    200,
                    &json!({"items": {
                        "zones/europe-west1-b": {"instances": [instance_json("web-2", "TERMINATED")]},
                    }}),
                )
            } else {
                Response::json_body(
                    200,
                    &json!({"items": {
                        "zones/us-central1-a": {"instances": [instance_json("web-1", "RUNNING")]},
                        "zones/us-east1-b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}},
                    }, "nextPageToken": "2"}),
                )
            }
        });
        let listed = Gcp::list().unwrap();
        let keys: Vec<(&str, InstanceState)> = listed
            .iter()
            .map(|instance| (instance.instance_key.as_str(), instance.state))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("web-1", InstanceState::Running),
                ("web-2", InstanceState::Stopped)
            ]
        );
        let first = &seen.borrow().requests[0].1;
        assert_eq!(
            first,
            &format!(
                "{ENDPOINT}/compute/v1/projects/shop-prod/aggregated/instances?filter=labels.bulkhead-managed%3Dtrue&maxResults=500"
            )
        );
    }

    #[test]
    fn google_errors_map_to_contract_errors() {
        let cases: Vec<(Response, Expect)> = vec![
            (
                google_error(
                    403,
                    "PERMISSION_DENIED",
                    "projectSuspended",
                    "Project shop-prod cannot accept requests while it is suspended.",
                ),
                |e| matches!(e, ProviderError::AccountSuspended(_)),
            ),
            (
                google_error(
                    403,
                    "PERMISSION_DENIED",
                    "accountDisabled",
                    "The account is disabled.",
                ),
                |e| matches!(e, ProviderError::AccountSuspended(_)),
            ),
            (
                google_error(
                    403,
                    "PERMISSION_DENIED",
                    "billingDisabled",
                    "Billing is disabled.",
                ),
                |e| matches!(e, ProviderError::AccountSuspended(_)),
            ),
            (
                google_error(
                    403,
                    "PERMISSION_DENIED",
                    "forbidden",
                    "Project suspended for abuse.",
                ),
                |e| matches!(e, ProviderError::AccountSuspended(_)),
            ),
            (
                google_error(
                    403,
                    "PERMISSION_DENIED",
                    "accessNotConfigured",
                    "Compute Engine API has not been used in project 1 before or it is disabled.",
                ),
                |e| matches!(e, ProviderError::Unauthorized(_)),
            ),
            (
                google_error(
                    401,
                    "UNAUTHENTICATED",
                    "authError",
                    "Request had invalid authentication credentials.",
                ),
                |e| matches!(e, ProviderError::Unauthorized(_)),
            ),
            (
                google_error(
                    403,
                    "PERMISSION_DENIED",
                    "forbidden",
                    "Required 'compute.instances.insert' permission",
                ),
                |e| matches!(e, ProviderError::Unauthorized(_)),
            ),
            (
                google_error(
                    403,
                    "PERMISSION_DENIED",
                    "insufficientPermissions",
                    "Request had insufficient authentication scopes.",
                ),
                |e| matches!(e, ProviderError::Unauthorized(_)),
            ),
            (
                google_error(
                    403,
                    "PERMISSION_DENIED",
                    "quotaExceeded",
                    "Quota 'CPUS' exceeded. Limit: 8.0 in region us-central1.",
                ),
                |e| matches!(e, ProviderError::QuotaExceeded(_)),
            ),
            (
                google_error(
                    403,
                    "RESOURCE_EXHAUSTED",
                    "rateLimitExceeded",
                    "Rate Limit Exceeded",
                ),
                |e| {
                    matches!(
                        e,
                        ProviderError::RateLimited(RateLimit {
                            retry_after_secs: 5,
                            ..
                        })
                    )
                },
            ),
            (
                {
                    let mut r = google_error(
                        429,
                        "RESOURCE_EXHAUSTED",
                        "rateLimitExceeded",
                        "Quota exceeded for quota metric 'Queries'",
                    );
                    r.headers.push(("Retry-After".into(), "17".into()));
                    r
                },
                |e| {
                    matches!(
                        e,
                        ProviderError::RateLimited(RateLimit {
                            retry_after_secs: 17,
                            ..
                        })
                    )
                },
            ),
            (
                google_error(404, "NOT_FOUND", "notFound", "The resource was not found"),
                |e| matches!(e, ProviderError::NotFound(_)),
            ),
            (
                google_error(
                    400,
                    "INVALID_ARGUMENT",
                    "invalid",
                    "Invalid value for field 'resource.name'",
                ),
                |e| matches!(e, ProviderError::InvalidSpec(m) if m.contains("resource.name")),
            ),
            (
                google_error(503, "UNAVAILABLE", "backendError", "Internal error."),
                |e| matches!(e, ProviderError::Unavailable(_)),
            ),
            (
                Response::new(502, "<html>bad gateway</html>"),
                |e| matches!(e, ProviderError::Unavailable(m) if m.contains("bad gateway")),
            ),
            (
                google_error(409, "ABORTED", "resourceNotReady", "busy"),
                |e| matches!(e, ProviderError::Internal(_)),
            ),
        ];
        for (response, expected) in cases {
            let error = api_error("reading zone us-central1-a", &response);
            assert!(expected(&error), "{} → {error:?}", response.text());
        }
    }

    #[test]
    fn token_endpoint_refusals_map_to_contract_errors() {
        configure();
        let answers: Vec<(Response, Expect)> = vec![
            (
                Response::json_body(
                    400,
                    &json!({"error": "invalid_grant", "error_description": "Account disabled"}),
                ),
                |e| matches!(e, ProviderError::AccountSuspended(_)),
            ),
            (
                Response::json_body(
                    400,
                    &json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."}),
                ),
                |e| matches!(e, ProviderError::Unauthorized(m) if m.contains("Invalid JWT Signature")),
            ),
            (
                Response::json_body(
                    401,
                    &json!({"error": "invalid_client", "error_description": "The OAuth client was not found."}),
                ),
                |e| matches!(e, ProviderError::Unauthorized(_)),
            ),
            (
                Response::json_body(429, &json!({"error": "rate_limit_exceeded"})),
                |e| {
                    matches!(
                        e,
                        ProviderError::RateLimited(RateLimit {
                            retry_after_secs: 5,
                            ..
                        })
                    )
                },
            ),
            (Response::new(503, "unavailable"), |e| {
                matches!(e, ProviderError::Unavailable(_))
            }),
        ];
        for (answer, expected) in answers {
            let seen_api = Rc::new(RefCell::new(0));
            let counter = seen_api.clone();
            testing::set_http_handler(move |request| {
                if request.url == TOKEN_URI {
                    return Ok(answer.clone());
                }
                *counter.borrow_mut() += 1;
                Ok(Response::new(200, "{}"))
            });
            let error = Gcp::health().unwrap_err();
            assert!(expected(&error), "{error:?}");
            assert_eq!(*seen_api.borrow(), 0, "no API call without a token");
            let text = format!("{error:?}");
            assert!(
                !text.contains("PRIVATE KEY") && !text.contains("eyJ"),
                "{text}"
            );
        }
    }

    #[test]
    fn token_errors_never_quote_the_assertion() {
        let assertion = sign_assertion(EMAIL, TEST_KEY, None, TOKEN_URI, unix_now()).unwrap();
        let echo = Response::json_body(
            400,
            &json!({"error": "invalid_request", "error_description": format!("bad: {assertion}")}),
        );
        let error = format!("{:?}", token_error(&echo, &assertion));
        assert!(
            error.contains("[assertion]") && !error.contains(&assertion),
            "{error}"
        );
    }

    #[test]
    fn missing_configuration_and_secrets_are_named() {
        testing::set_http_handler(|_| Ok(Response::new(200, "{}")));
        assert!(
            matches!(Gcp::health(), Err(ProviderError::InvalidSpec(m)) if m.contains("project"))
        );
        testing::set_config("project", "shop-prod");
        assert!(
            matches!(Gcp::health(), Err(ProviderError::Unauthorized(m)) if m.contains("client_email"))
        );
        testing::set_secret("client_email", EMAIL);
        testing::set_secret("private_key", "not a key");
        assert!(matches!(
            Gcp::health(),
            Err(ProviderError::Unauthorized(m)) if m.contains("private_key") && !m.contains("not a key")
        ));
        let info = Gcp::info();
        assert_eq!(info.name, "gcp");
        assert_eq!(info.regions, vec!["us-central1-a"]);
    }

    #[test]
    fn statuses_map_to_states() {
        assert_eq!(state_of("PROVISIONING"), InstanceState::Pending);
        assert_eq!(state_of("STAGING"), InstanceState::Pending);
        assert_eq!(state_of("RUNNING"), InstanceState::Running);
        assert_eq!(state_of("STOPPING"), InstanceState::Stopping);
        assert_eq!(state_of("SUSPENDING"), InstanceState::Stopping);
        assert_eq!(state_of("TERMINATED"), InstanceState::Stopped);
        assert_eq!(state_of("SUSPENDED"), InstanceState::Stopped);
        assert_eq!(label_key("Cost Center").as_deref(), Some("cost_center"));
        assert_eq!(label_key("_x").as_deref(), Some("l-_x"));
        assert_eq!(label_key("  "), None);
        assert_eq!(label_sanitise(&"a".repeat(100)).len(), 63);
        assert!(resource_name_valid("web-1") && !resource_name_valid("Web_1"));
    }
}
