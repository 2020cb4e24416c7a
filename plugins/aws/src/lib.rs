//! The Bulkhead provider plugin for AWS EC2: instances are EC2 instances, made and found
//! through the EC2 Query API (version `2016-11-15`, form-encoded `POST`s answered in XML),
//! every request signed with AWS Signature Version 4 ([`sigv4`]) and every answer read as XML
//! by `roxmltree` ([`xml`]).
//!
//! Configuration:
//!
//! | key | default | |
//! | --- | --- | --- |
//! | `regions` | `us-east-1` | comma-separated |
//! | `endpoint` | `https://ec2.{region}.amazonaws.com` | when set, used for every region (e.g. the simulator's `http://127.0.0.1:PORT`) |
//! | `logs_endpoint` | `https://logs.{region}.amazonaws.com` | CloudWatch Logs, for `logs`; when set, used for every region |
//! | `log_group` | `bulkhead-instances` | the log group of the instances' streams `ID/stdout` and `ID/stderr` |
//! | `image_id` | `ami-0bulkhead` | |
//! | `instance_type` | chosen by size | every instance on this type |
//!
//! Secrets: `access_key_id` and `secret_access_key`.
//!
//! Sizes (contract 0.7.0): each instance gets the cheapest instance type that holds the spec's
//! size ([`INSTANCE_TYPES`]: burstable types at their baseline CPU, which they sustain; general
//! purpose, compute and memory optimized ones at their vCPUs), named in the instance's
//! `machine-type`; a size no type holds is `invalid-spec`. A configured `instance_type` is used
//! for every instance instead.
//!
//! Instances carry the tags `bulkhead-key` (the instance key), `bulkhead-managed=true`,
//! `bulkhead-port` (the workload's port) and `bulkhead-artifact`, plus the spec's labels.
//! `provision` is idempotent through EC2's `ClientToken` (the instance key); `describe`,
//! `deprovision` and `list` find instances by those tags. EC2's error codes map onto the
//! contract's errors ([`map_error`]).
//!
//! Capability `logs`: an instance's output is read from CloudWatch Logs ([`logs`]), where the
//! CloudWatch agent ships it: the streams `INSTANCE-ID/stdout` and `INSTANCE-ID/stderr` of the
//! log group `log_group`, read with `GetLogEvents` (JSON protocol, signed for `logs`) and
//! merged by time. CloudWatch Logs' error codes map through the same [`map_error`].

pub mod logs;
pub mod sigv4;
pub mod xml;

use std::time::SystemTime;

use bulkhead_sdk::http::{Request, form_encode};
use bulkhead_sdk::{
    ConfigKey, HealthReport, HealthStatus, Instance, InstanceSize, InstanceSpec, InstanceState,
    LogPage, LogRequest, Provider, ProviderError, ProviderInfo, RateLimit, WorkloadHealth,
};

use sigv4::Credentials;
use xml::Element;

/// The EC2 API version the plugin speaks.
pub const API_VERSION: &str = "2016-11-15";
const SERVICE: &str = "ec2";
const DEFAULT_REGION: &str = "us-east-1";
const DEFAULT_IMAGE: &str = "ami-0bulkhead";
/// The instance types an instance may get, cheapest first (on-demand prices of us-east-1):
/// name, CPU in thousandths of a vCPU (a burstable type's baseline, which it sustains without
/// credits), memory in MiB.
pub const INSTANCE_TYPES: &[(&str, u32, u32)] = &[
    ("t3.nano", 100, 512),
    ("t3.micro", 200, 1024),
    ("t3.small", 400, 2048),
    ("t3.medium", 400, 4096),
    ("t3.large", 600, 8192),
    ("c6i.large", 2000, 4096),
    ("m6i.large", 2000, 8192),
    ("r6i.large", 2000, 16384),
    ("c6i.xlarge", 4000, 8192),
    ("m6i.xlarge", 4000, 16384),
    ("r6i.xlarge", 4000, 32768),
    ("c6i.2xlarge", 8000, 16384),
    ("m6i.2xlarge", 8000, 32768),
    ("r6i.2xlarge", 8000, 65536),
    ("c6i.4xlarge", 16000, 32768),
    ("m6i.4xlarge", 16000, 65536),
    ("r6i.4xlarge", 16000, 131072),
    ("c6i.8xlarge", 32000, 65536),
    ("m6i.8xlarge", 32000, 131072),
    ("r6i.8xlarge", 32000, 262144),
];

/// The cheapest instance type that holds `size`; `invalid-spec` when none does.
pub fn instance_type_for(size: &InstanceSize) -> Result<&'static str, ProviderError> {
    size.fitting(INSTANCE_TYPES).ok_or_else(|| {
        ProviderError::InvalidSpec(format!(
            "no instance type of this provider holds {}m CPU and {} MiB (the largest are \
                 m6i.8xlarge: 32 vCPUs, 128 GiB, and r6i.8xlarge: 32 vCPUs, 256 GiB)",
            size.cpu_millis, size.memory_mib
        ))
    })
}
/// The workload port of an instance without a `bulkhead-port` tag.
const DEFAULT_PORT: u16 = 8080;
/// `Retry-After` when a throttled answer does not say.
const DEFAULT_RETRY_AFTER_SECS: u32 = 5;
/// EC2 keeps a tag value to 256 characters.
const MAX_TAG_VALUE: usize = 255;
/// Client tokens tried for one key: a token whose instance was terminated (the key was
/// deprovisioned, then provisioned again) still answers with that instance, so the next one
/// (`key.1`, `key.2`, ...) is tried.
const MAX_CLIENT_TOKENS: u32 = 16;
/// Pages of `DescribeInstances` followed at most.
const MAX_PAGES: usize = 50;
/// Instance states that are not `terminated`.
const LIVE_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

const TAG_KEY: &str = "bulkhead-key";
const TAG_MANAGED: &str = "bulkhead-managed";
const TAG_PORT: &str = "bulkhead-port";
const TAG_ARTIFACT: &str = "bulkhead-artifact";

pub struct Aws;

fn regions() -> Vec<String> {
    bulkhead_sdk::config_list("regions", &[DEFAULT_REGION])
}

/// The EC2 endpoint of `region`: the configured `endpoint`, or AWS's regional one.
fn endpoint(region: &str) -> String {
    service_endpoint("endpoint", "ec2", region)
}

/// The endpoint of AWS service `service` in `region`: the configuration `key` when set (for
/// every region), or AWS's regional one.
fn service_endpoint(key: &str, service: &str, region: &str) -> String {
    match bulkhead_sdk::config(key) {
        Some(endpoint) if !endpoint.trim().is_empty() => {
            endpoint.trim().trim_end_matches('/').to_owned()
        }
        _ => format!("https://{service}.{region}.amazonaws.com"),
    }
}

fn config_or(key: &str, default: &str) -> String {
    bulkhead_sdk::config(key)
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

fn credentials() -> Result<Credentials, ProviderError> {
    let secret = |key| bulkhead_sdk::secret(key).filter(|value| !value.trim().is_empty());
    match (secret("access_key_id"), secret("secret_access_key")) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(Credentials {
            access_key_id: access_key_id.trim().to_owned(),
            secret_access_key: secret_access_key.trim().to_owned(),
        }),
        _ => Err(ProviderError::Unauthorized(
            "the secrets `access_key_id` and `secret_access_key` must both be set".into(),
        )),
    }
}

/// A failed EC2 call: the contract error, and EC2's error code when it gave one.
#[derive(Debug)]
struct Failure {
    code: Option<String>,
    error: ProviderError,
}

impl From<Failure> for ProviderError {
    fn from(failure: Failure) -> Self {
        failure.error
    }
}

impl From<ProviderError> for Failure {
    fn from(error: ProviderError) -> Self {
        Failure { code: None, error }
    }
}

/// The contract error for an AWS error `code` (HTTP `status`, `message`): EC2's, and those of
/// the JSON-protocol services (CloudWatch Logs).
pub fn map_error(
    status: u16,
    code: &str,
    message: String,
    retry_after_secs: Option<u32>,
) -> ProviderError {
    let says_blocked = {
        let text = message.to_lowercase();
        text.contains("blocked") || text.contains("suspended")
    };
    match code {
        "Blocked" | "OptInRequired" | "PendingVerification" => {
            ProviderError::AccountSuspended(message)
        }
        "AccessDeniedException" if says_blocked => ProviderError::AccountSuspended(message),
        "AuthFailure"
        | "UnauthorizedOperation"
        | "SignatureDoesNotMatch"
        | "MissingAuthenticationToken"
        | "InvalidClientTokenId"
        | "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationTokenException"
        | "ExpiredTokenException" => ProviderError::Unauthorized(message),
        "RequestLimitExceeded" | "Throttling" | "ThrottlingException" => {
            ProviderError::RateLimited(RateLimit {
                retry_after_secs: retry_after_secs.unwrap_or(DEFAULT_RETRY_AFTER_SECS),
                message,
            })
        }
        "InsufficientInstanceCapacity" | "InstanceLimitExceeded" | "VcpuLimitExceeded" => {
            ProviderError::QuotaExceeded(message)
        }
        "InvalidInstanceID.NotFound" | "ResourceNotFoundException" => {
            ProviderError::NotFound(message)
        }
        "ServiceUnavailableException" => ProviderError::Unavailable(message),
        code if code.starts_with("Invalid") || code == "MissingParameter" => {
            ProviderError::InvalidSpec(message)
        }
        _ if (500..600).contains(&status) => ProviderError::Unavailable(message),
        _ => ProviderError::Internal(message),
    }
}

/// The contract error of an answer that is not AWS speaking (a proxy, a load balancer), by its
/// status alone.
fn status_error(response: &bulkhead_sdk::http::Response, message: String) -> ProviderError {
    match response.status {
        429 => ProviderError::RateLimited(RateLimit {
            retry_after_secs: response
                .retry_after_secs()
                .unwrap_or(DEFAULT_RETRY_AFTER_SECS),
            message,
        }),
        500..=599 => ProviderError::Unavailable(message),
        _ => ProviderError::Internal(message),
    }
}

/// Calls EC2 `action` in `region` with `params`, signed; the parsed XML answer.
fn call(
    credentials: &Credentials,
    region: &str,
    action: &str,
    params: &[(String, String)],
) -> Result<Element, Failure> {
    let url = format!("{}/", endpoint(region));
    let mut body = format!("Action={}&Version={API_VERSION}", form_encode(action));
    for (name, value) in params {
        body.push('&');
        body.push_str(&form_encode(name));
        body.push('=');
        body.push_str(&form_encode(value));
    }
    let length = body.len();
    let request = Request::post(&url)
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .body(body);
    let request = sigv4::sign(request, credentials, region, SERVICE, SystemTime::now())?
        .header("content-length", length.to_string());
    let response = request.send().map_err(ProviderError::from)?;
    let text = response.text();
    let excerpt = || text.chars().take(300).collect::<String>();
    if (200..300).contains(&response.status) {
        return xml::parse(&text).map_err(|err| {
            Failure::from(ProviderError::Internal(format!(
                "EC2 {action} in {region}: unreadable answer ({err}): {}",
                excerpt()
            )))
        });
    }
    let document = xml::parse(&text).ok();
    let code = document
        .as_ref()
        .and_then(|doc| doc.find("Code"))
        .map(|code| code.text.trim().to_owned())
        .filter(|code| !code.is_empty());
    let Some(code) = code else {
        // Not EC2 speaking (a proxy, a load balancer): go by the status alone.
        let message = format!(
            "EC2 {action} in {region}: HTTP {}: {}",
            response.status,
            excerpt()
        );
        return Err(status_error(&response, message).into());
    };
    let detail = document
        .as_ref()
        .and_then(|doc| doc.find("Message"))
        .map(|message| message.text.trim().to_owned())
        .unwrap_or_default();
    let message = format!(
        "EC2 {action} in {region}: {code} (HTTP {}): {detail}",
        response.status
    );
    bulkhead_sdk::debug!("{message}");
    Err(Failure {
        error: map_error(response.status, &code, message, response.retry_after_secs()),
        code: Some(code),
    })
}

/// An instance as `DescribeInstances` / `RunInstances` describe it.
#[derive(Debug, Clone)]
struct Ec2Instance {
    id: String,
    state: String,
    private_ip: Option<String>,
    instance_type: Option<String>,
    launch_time: String,
    tags: Vec<(String, String)>,
}

impl Ec2Instance {
    fn parse(item: &Element) -> Option<Self> {
        Some(Ec2Instance {
            id: item.text_at(&["instanceId"])?.to_owned(),
            state: item
                .text_at(&["instanceState", "name"])
                .unwrap_or_default()
                .to_owned(),
            private_ip: item.text_at(&["privateIpAddress"]).map(str::to_owned),
            instance_type: item.text_at(&["instanceType"]).map(str::to_owned),
            launch_time: item.text_at(&["launchTime"]).unwrap_or_default().to_owned(),
            tags: item
                .child("tagSet")
                .map(|set| {
                    set.all("item")
                        .filter_map(|tag| {
                            Some((
                                tag.text_at(&["key"])?.to_owned(),
                                tag.at(&["value"])
                                    .map(|value| value.text.clone())
                                    .unwrap_or_default(),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(tag, _)| tag == key)
            .map(|(_, value)| value.as_str())
    }

    fn gone(&self) -> bool {
        matches!(self.state.as_str(), "terminated" | "shutting-down")
    }

    fn contract_state(&self) -> InstanceState {
        match self.state.as_str() {
            "pending" => InstanceState::Pending,
            "running" => InstanceState::Running,
            "shutting-down" | "stopping" => InstanceState::Stopping,
            "terminated" | "stopped" => InstanceState::Stopped,
            _ => InstanceState::Failed,
        }
    }

    /// The contract's view: `address` is the private IP and the workload's port.
    fn to_contract(&self, instance_key: String, region: &str) -> Instance {
        let state = self.contract_state();
        let port = self
            .tag(TAG_PORT)
            .and_then(|port| port.parse::<u16>().ok())
            .unwrap_or(DEFAULT_PORT);
        let address = match state {
            InstanceState::Stopped | InstanceState::Failed => None,
            _ => self.private_ip.as_ref().map(|ip| format!("{ip}:{port}")),
        };
        Instance {
            instance_key,
            provider_id: self.id.clone(),
            region: region.to_owned(),
            state,
            address,
            health: WorkloadHealth::Unchecked,
            detail: None,
            machine_type: self.instance_type.clone(),
        }
    }
}

/// The instances of a `RunInstances` answer (`instancesSet/item`).
fn launched(doc: &Element) -> Vec<Ec2Instance> {
    doc.child("instancesSet")
        .map(|set| set.all("item").filter_map(Ec2Instance::parse).collect())
        .unwrap_or_default()
}

/// `DescribeInstances` in `region` with `filters` (name, values), every page.
fn describe_instances(
    credentials: &Credentials,
    region: &str,
    filters: &[(&str, Vec<String>)],
) -> Result<Vec<Ec2Instance>, Failure> {
    let mut params = Vec::new();
    for (n, (name, values)) in filters.iter().enumerate() {
        params.push((format!("Filter.{}.Name", n + 1), (*name).to_owned()));
        for (m, value) in values.iter().enumerate() {
            params.push((format!("Filter.{}.Value.{}", n + 1, m + 1), value.clone()));
        }
    }
    let mut found = Vec::new();
    let mut next_token: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut page_params = params.clone();
        if let Some(token) = &next_token {
            page_params.push(("NextToken".into(), token.clone()));
        }
        let doc = call(credentials, region, "DescribeInstances", &page_params)?;
        if let Some(reservations) = doc.child("reservationSet") {
            for reservation in reservations.all("item") {
                if let Some(set) = reservation.child("instancesSet") {
                    found.extend(set.all("item").filter_map(Ec2Instance::parse));
                }
            }
        }
        next_token = doc.text_at(&["nextToken"]).map(str::to_owned);
        if next_token.is_none() {
            break;
        }
    }
    Ok(found)
}

fn live_states() -> Vec<String> {
    LIVE_STATES
        .iter()
        .map(|state| (*state).to_owned())
        .collect()
}

/// The live (not terminated) instances tagged with `instance_key` in every region.
fn instances_of(
    credentials: &Credentials,
    instance_key: &str,
) -> Result<Vec<(String, Ec2Instance)>, ProviderError> {
    let mut found = Vec::new();
    for region in regions() {
        let instances = describe_instances(
            credentials,
            &region,
            &[
                (&format!("tag:{TAG_KEY}"), vec![instance_key.to_owned()]),
                ("instance-state-name", live_states()),
            ],
        )?;
        found.extend(
            instances
                .into_iter()
                .filter(|instance| instance.state != "terminated")
                .map(|instance| (region.clone(), instance)),
        );
    }
    Ok(found)
}

/// The `ClientToken` of attempt `attempt` for `instance_key` (at most 64 ASCII characters).
fn client_token(instance_key: &str, attempt: u32) -> String {
    let base = if instance_key.len() <= 60 && instance_key.bytes().all(|b| b.is_ascii_graphic()) {
        instance_key.to_owned()
    } else {
        format!("bh-{}", &sigv4::sha256_hex(instance_key.as_bytes())[..40])
    };
    if attempt == 0 {
        base
    } else {
        format!("{base}.{attempt}")
    }
}

/// The tags of a new instance: Bulkhead's own, then the spec's labels (sorted, so that a
/// repeated request is the same request), leaving out labels that would override ours or
/// that EC2 reserves.
fn tags_for(spec: &InstanceSpec) -> Vec<(String, String)> {
    let mut tags = vec![
        (TAG_KEY.to_owned(), spec.instance_key.clone()),
        (TAG_MANAGED.to_owned(), "true".to_owned()),
        (TAG_PORT.to_owned(), spec.port.to_string()),
        (
            TAG_ARTIFACT.to_owned(),
            spec.artifact.chars().take(MAX_TAG_VALUE).collect(),
        ),
    ];
    let mut labels = spec.labels.clone();
    labels.sort();
    for (key, value) in labels {
        if key.starts_with("bulkhead-")
            || key.to_ascii_lowercase().starts_with("aws:")
            || tags.iter().any(|(existing, _)| *existing == key)
        {
            bulkhead_sdk::warn!("label `{key}` left out of the EC2 tags: the name is reserved");
            continue;
        }
        tags.push((key, value));
    }
    tags
}

impl Provider for Aws {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "aws".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: regions(),
            capabilities: vec!["logs".into()],
            config: vec![
                ConfigKey::optional("regions", "Comma-separated regions (default us-east-1)"),
                ConfigKey::optional(
                    "endpoint",
                    "EC2 endpoint for every region (default https://ec2.{region}.amazonaws.com)",
                ),
                ConfigKey::optional(
                    "logs_endpoint",
                    "CloudWatch Logs endpoint for every region (default \
                     https://logs.{region}.amazonaws.com)",
                ),
                ConfigKey::optional(
                    "log_group",
                    "The CloudWatch Logs group of the instances' output (default \
                     bulkhead-instances)",
                ),
                ConfigKey::secret("access_key_id", "The IAM access key id"),
                ConfigKey::secret("secret_access_key", "The IAM secret access key"),
            ],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        let credentials = credentials()?;
        let region = regions().remove(0);
        let doc = call(&credentials, &region, "DescribeAvailabilityZones", &[])?;
        let available = doc
            .child("availabilityZoneInfo")
            .map(|zones| {
                zones
                    .all("item")
                    .filter(|zone| zone.text_at(&["zoneState"]) == Some("available"))
                    .count()
            })
            .unwrap_or(0);
        Ok(if available > 0 {
            HealthReport {
                status: HealthStatus::Healthy,
                message: format!("EC2 in {region}: {available} availability zones available"),
            }
        } else {
            HealthReport {
                status: HealthStatus::Degraded,
                message: format!("EC2 in {region} answers, but no availability zone is available"),
            }
        })
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        if !regions().contains(&spec.region) {
            return Err(ProviderError::InvalidSpec(format!(
                "unknown region `{}` (configured: {})",
                spec.region,
                regions().join(", ")
            )));
        }
        if spec.port == 0 {
            return Err(ProviderError::InvalidSpec("the port must not be 0".into()));
        }
        let credentials = credentials()?;
        let image_id = config_or("image_id", DEFAULT_IMAGE);
        let instance_type = match bulkhead_sdk::config("instance_type")
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty())
        {
            Some(configured) => configured,
            None => instance_type_for(&spec.size)?.to_owned(),
        };
        let mut base = vec![
            ("ImageId".to_owned(), image_id),
            ("InstanceType".to_owned(), instance_type),
            ("MinCount".to_owned(), "1".to_owned()),
            ("MaxCount".to_owned(), "1".to_owned()),
            (
                "TagSpecification.1.ResourceType".to_owned(),
                "instance".to_owned(),
            ),
        ];
        for (n, (key, value)) in tags_for(&spec).into_iter().enumerate() {
            base.push((format!("TagSpecification.1.Tag.{}.Key", n + 1), key));
            base.push((format!("TagSpecification.1.Tag.{}.Value", n + 1), value));
        }
        for attempt in 0..MAX_CLIENT_TOKENS {
            let token = client_token(&spec.instance_key, attempt);
            let mut params = base.clone();
            params.push(("ClientToken".to_owned(), token.clone()));
            bulkhead_sdk::info!(
                "provisioning {} in {} (client token {token})",
                spec.instance_key,
                spec.region
            );
            match call(&credentials, &spec.region, "RunInstances", &params) {
                Ok(doc) => {
                    let Some(instance) = launched(&doc).into_iter().next() else {
                        return Err(ProviderError::Internal(format!(
                            "EC2 RunInstances in {} answered without an instance",
                            spec.region
                        )));
                    };
                    if instance.gone() {
                        // The token made an instance that was deprovisioned since.
                        bulkhead_sdk::debug!(
                            "client token {token} belongs to {} ({}); trying the next",
                            instance.id,
                            instance.state
                        );
                        continue;
                    }
                    return Ok(instance.to_contract(spec.instance_key, &spec.region));
                }
                Err(Failure {
                    code: Some(code), ..
                }) if code == "IdempotentParameterMismatch" => {
                    // The token was used with other parameters (another artifact, other
                    // labels): the instance already made for the key is the answer.
                    match Self::describe(spec.instance_key.clone()) {
                        Ok(instance) => return Ok(instance),
                        Err(ProviderError::NotFound(_)) => continue,
                        Err(err) => return Err(err),
                    }
                }
                Err(failure) => return Err(failure.error),
            }
        }
        Err(ProviderError::Internal(format!(
            "no usable EC2 client token left for `{}` after {MAX_CLIENT_TOKENS} attempts",
            spec.instance_key
        )))
    }

    fn deprovision(instance_key: String) -> Result<(), ProviderError> {
        let credentials = credentials()?;
        let mut by_region: Vec<(String, Vec<String>)> = Vec::new();
        for (region, instance) in instances_of(&credentials, &instance_key)? {
            if instance.gone() {
                continue;
            }
            match by_region.iter_mut().find(|(known, _)| *known == region) {
                Some((_, ids)) => ids.push(instance.id),
                None => by_region.push((region, vec![instance.id])),
            }
        }
        for (region, ids) in by_region {
            bulkhead_sdk::info!(
                "deprovisioning {instance_key}: terminating {} in {region}",
                ids.join(", ")
            );
            let params: Vec<(String, String)> = ids
                .into_iter()
                .enumerate()
                .map(|(n, id)| (format!("InstanceId.{}", n + 1), id))
                .collect();
            match call(&credentials, &region, "TerminateInstances", &params) {
                Ok(_) => {}
                // Terminated (and forgotten) meanwhile: already gone is done.
                Err(Failure {
                    error: ProviderError::NotFound(_),
                    ..
                }) => {}
                Err(failure) => return Err(failure.error),
            }
        }
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        let credentials = credentials()?;
        let newest = instances_of(&credentials, &instance_key)?
            .into_iter()
            .max_by(|(_, a), (_, b)| a.launch_time.cmp(&b.launch_time));
        match newest {
            Some((region, instance)) => Ok(instance.to_contract(instance_key, &region)),
            None => Err(ProviderError::NotFound(format!(
                "no EC2 instance for `{instance_key}`"
            ))),
        }
    }

    /// A page of the instance's output, from CloudWatch Logs ([`logs`]).
    fn logs(instance_key: String, request: LogRequest) -> Result<LogPage, ProviderError> {
        let credentials = credentials()?;
        let cursor = request
            .after
            .as_deref()
            .map(logs::Cursor::parse)
            .transpose()?;
        let newest = instances_of(&credentials, &instance_key)?
            .into_iter()
            .max_by(|(_, a), (_, b)| a.launch_time.cmp(&b.launch_time));
        let Some((region, instance)) = newest else {
            return Err(ProviderError::NotFound(format!(
                "no EC2 instance for `{instance_key}`"
            )));
        };
        logs::logs(&credentials, &region, &instance.id, cursor, &request)
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        let credentials = credentials()?;
        let mut out = Vec::new();
        for region in regions() {
            let instances = describe_instances(
                &credentials,
                &region,
                &[
                    (&format!("tag:{TAG_MANAGED}"), vec!["true".to_owned()]),
                    ("instance-state-name", live_states()),
                ],
            )?;
            out.extend(instances.into_iter().filter_map(|instance| {
                let key = instance.tag(TAG_KEY)?.to_owned();
                (instance.state != "terminated").then(|| instance.to_contract(key, &region))
            }));
        }
        Ok(out)
    }
}

bulkhead_sdk::export_provider!(Aws);

#[cfg(test)]
mod tests;
