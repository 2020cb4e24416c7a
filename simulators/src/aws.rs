//! The AWS EC2 (and CloudWatch Logs) simulator: exactly the subset of the EC2 Query API
//! (version `2016-11-15`) that the `aws` provider plugin speaks — `RunInstances`,
//! `DescribeInstances`, `TerminateInstances` and `DescribeAvailabilityZones` — answered in
//! EC2's XML shapes, behind real AWS Signature Version 4 verification (service `ec2`, the
//! simulator's region).
//!
//! What EC2 checks is checked here too: the `Authorization` header's structure, the access key
//! id (`AuthFailure`), the request date (`RequestExpired` when more than 5 minutes off), the
//! credential scope and the signature over method, path, query, signed headers and the SHA-256
//! of the body (`SignatureDoesNotMatch`, the expected signature computed by AWS's own signer:
//! [`signature`]); then the parameters (`MissingParameter`,
//! `InvalidParameterValue`, `InvalidInstanceID.NotFound`, ...). `RunInstances` is idempotent on
//! `ClientToken` as in EC2: the same token returns the same instance — even once it is
//! terminated — and the same token with other parameters is `IdempotentParameterMismatch`.
//!
//! Instances are real ([`crate::instances::InstanceServer`]): each serves HTTP on its own
//! loopback address, at the port of its `bulkhead-port` tag (8080 without one), and that
//! address is its `privateIpAddress`. Terminating one stops its server; it is still described
//! (as `terminated`) for an hour, like EC2 does.
//!
//! Faults ([`crate::faults`]) apply to authenticated calls, as EC2 reports them: a suspended
//! account is `Blocked` (403), throttling is `RequestLimitExceeded` (503, with `Retry-After`),
//! failing is `InternalError` (500); latency delays every call.
//!
//! The same endpoint answers CloudWatch Logs' `GetLogEvents` ([`logs`]): a `POST /` naming
//! its operation in `X-Amz-Target` (JSON protocol, signed for the service `logs`) reads what
//! the instances printed, from the log group [`LOG_GROUP`] and its streams `ID/stdout` and
//! `ID/stderr`. Configure the plugin's `logs_endpoint` with the same URL. What an instance
//! prints is kept after it is terminated: [`AwsSimulator::instance_output`] reads it and adds
//! lines.

mod logs;
mod signature;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use crate::RunningSimulator;
use crate::faults::Faults;
use crate::instances::{InstanceServer, Output, OutputStream};

pub use logs::LOG_GROUP;

/// The API version the simulator speaks.
pub const API_VERSION: &str = "2016-11-15";
const NAMESPACE: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";
/// The simulated account.
const OWNER_ID: &str = "123456789012";
/// How long a terminated instance is still described.
const TERMINATED_VISIBLE: Duration = Duration::from_secs(60 * 60);
/// The workload port of an instance without a `bulkhead-port` tag.
const DEFAULT_PORT: u16 = 8080;
/// EC2's limits on tags.
const MAX_TAGS: usize = 50;
const MAX_TAG_KEY: usize = 128;
const MAX_TAG_VALUE: usize = 256;
const MAX_CLIENT_TOKEN: usize = 64;

/// The one access key the simulated account accepts.
#[derive(Clone)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for AwsCredentials {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

/// A running EC2 simulator.
pub struct AwsSimulator {
    pub server: RunningSimulator,
    pub faults: Faults,
    pub region: String,
    shared: Arc<Shared>,
}

impl AwsSimulator {
    /// Serves the simulated EC2 endpoint of `region` on `listen` (port 0 picks one), accepting
    /// requests signed with `credentials`.
    pub async fn start(
        listen: SocketAddr,
        region: &str,
        credentials: AwsCredentials,
    ) -> std::io::Result<AwsSimulator> {
        let faults = Faults::default();
        let shared = Arc::new(Shared {
            region: region.to_owned(),
            credentials,
            faults: faults.clone(),
            ec2: Mutex::new(Ec2::default()),
            launching: tokio::sync::Mutex::new(()),
            log_streams: Mutex::default(),
        });
        let router = Router::new()
            .route("/", post(endpoint).get(ec2_endpoint))
            .with_state(shared.clone())
            .layer(axum::middleware::from_fn_with_state(
                faults.clone(),
                Faults::observe,
            ))
            .merge(faults.router());
        let server = RunningSimulator::serve(listen, router).await?;
        tracing::info!(addr = %server.addr, region, "EC2 simulator listening");
        Ok(AwsSimulator {
            server,
            faults,
            region: region.to_owned(),
            shared,
        })
    }

    /// `http://addr`: the endpoint to configure in the plugin.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Instances not terminated (pending or running).
    pub fn instance_count(&self) -> usize {
        self.live_instances(|live| live.count())
    }

    /// The `bulkhead-key` tag (the control plane's instance key) of each instance not
    /// terminated, sorted: what a check of "none duplicated, none orphaned" compares with the
    /// control plane's own records.
    pub fn live_instance_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.live_instances(|live| {
            live.filter_map(|instance| {
                let (_, key) = instance
                    .tags
                    .iter()
                    .find(|(key, _)| key == "bulkhead-key")?;
                Some(key.clone())
            })
            .collect()
        });
        keys.sort();
        keys
    }

    /// Makes the live instance tagged `bulkhead-key=KEY` answer every request with `status`.
    /// Returns whether there was one.
    pub fn instance_answer_with(&self, key: &str, status: StatusCode) -> bool {
        self.live_instances(|live| {
            let mut found = false;
            for instance in live {
                let tagged = instance
                    .tags
                    .iter()
                    .any(|(name, value)| name == "bulkhead-key" && value == key);
                if tagged && let Some(server) = &instance.server {
                    server.answer_with(status);
                    found = true;
                }
            }
            found
        })
    }

    /// What the live instance tagged `bulkhead-key=KEY` printed (the streams
    /// `ID/stdout` and `ID/stderr` of [`LOG_GROUP`]); `None` when there is none. The handle
    /// reads the lines ([`Output::lines`]) and adds some ([`Output::print`]).
    pub fn instance_output(&self, key: &str) -> Option<Output> {
        self.live_instances(|live| {
            live.filter(|instance| {
                instance
                    .tags
                    .iter()
                    .any(|(name, value)| name == "bulkhead-key" && value == key)
            })
            .max_by_key(|instance| instance.launch_time)
            .map(|instance| instance.output.clone())
        })
    }

    /// Makes the live instance tagged `bulkhead-key=KEY` print `text` on `stream`. Returns
    /// whether there was one.
    pub fn instance_print(&self, key: &str, stream: OutputStream, text: &str) -> bool {
        self.instance_output(key)
            .map(|output| output.print(stream, text))
            .is_some()
    }

    /// The EC2 id of the live instance tagged `bulkhead-key=KEY` (its log streams' prefix).
    pub fn instance_id(&self, key: &str) -> Option<String> {
        self.live_instances(|live| {
            live.filter(|instance| {
                instance
                    .tags
                    .iter()
                    .any(|(name, value)| name == "bulkhead-key" && value == key)
            })
            .max_by_key(|instance| instance.launch_time)
            .map(|instance| instance.id.clone())
        })
    }

    /// `read` of the instances not terminated.
    fn live_instances<T>(
        &self,
        read: impl FnOnce(&mut dyn Iterator<Item = &Ec2Instance>) -> T,
    ) -> T {
        let ec2 = self.shared.ec2.lock().expect("not poisoned");
        let mut live = ec2
            .instances
            .values()
            .filter(|instance| instance.state != InstanceState::Terminated);
        read(&mut live)
    }

    /// When each instance launched at or after `since` was launched, as time since `since`,
    /// in order: the pace at which a client really provisions.
    pub fn launches_since(&self, since: Instant) -> Vec<Duration> {
        self.shared
            .ec2
            .lock()
            .expect("not poisoned")
            .launches
            .iter()
            .filter(|at| **at >= since)
            .map(|at| *at - since)
            .collect()
    }
}

/// State shared by the handlers.
struct Shared {
    region: String,
    credentials: AwsCredentials,
    faults: Faults,
    ec2: Mutex<Ec2>,
    /// Serializes `RunInstances`, so that two calls with one `ClientToken` make one instance
    /// (the instance's server is started between two uses of `ec2`).
    launching: tokio::sync::Mutex<()>,
    /// What each instance printed, by instance id: its log streams, kept after it is
    /// terminated (and forgotten by EC2).
    log_streams: Mutex<BTreeMap<String, Output>>,
}

#[derive(Default)]
struct Ec2 {
    instances: BTreeMap<String, Ec2Instance>,
    /// `ClientToken` → (the parameters it was first used with, the instance it made).
    tokens: HashMap<String, (String, String)>,
    /// When each instance was launched (never purged).
    launches: Vec<Instant>,
}

impl Ec2 {
    /// Forgets instances terminated long ago (and their client tokens), as EC2 does.
    fn purge(&mut self) {
        let gone: Vec<String> = self
            .instances
            .iter()
            .filter(|(_, instance)| {
                instance
                    .terminated_at
                    .is_some_and(|at| at.elapsed() > TERMINATED_VISIBLE)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.instances.remove(id);
        }
        self.tokens
            .retain(|_, (_, instance_id)| !gone.contains(instance_id));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
}

impl InstanceState {
    fn code(self) -> u16 {
        match self {
            InstanceState::Pending => 0,
            InstanceState::Running => 16,
            InstanceState::ShuttingDown => 32,
            InstanceState::Terminated => 48,
        }
    }

    fn name(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Terminated => "terminated",
        }
    }
}

struct Ec2Instance {
    id: String,
    reservation_id: String,
    image_id: String,
    instance_type: String,
    launch_time: SystemTime,
    state: InstanceState,
    private_ip: Ipv4Addr,
    client_token: String,
    tags: Vec<(String, String)>,
    /// The instance's HTTP server; `None` once terminated.
    server: Option<InstanceServer>,
    /// What its workload printed (kept once terminated).
    output: Output,
    terminated_at: Option<Instant>,
}

/// An EC2 error: HTTP status, error code and message.
#[derive(Debug)]
struct Ec2Error {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u32>,
}

impl Ec2Error {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    fn incomplete_signature(message: impl Into<String>) -> Self {
        Self::bad_request("IncompleteSignature", message)
    }

    fn signature_mismatch(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "SignatureDoesNotMatch", message)
    }

    fn missing_parameter(name: &str) -> Self {
        Self::bad_request(
            "MissingParameter",
            format!("The request must contain the parameter {name}"),
        )
    }

    fn invalid_value(name: &str, value: &str) -> Self {
        Self::bad_request(
            "InvalidParameterValue",
            format!("Invalid value '{value}' for {name}."),
        )
    }
}

impl IntoResponse for Ec2Error {
    fn into_response(self) -> Response {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{}</Code><Message>{}</Message></Error></Errors><RequestID>{}</RequestID></Response>",
            self.code,
            xml_escape(&self.message),
            uuid::Uuid::new_v4()
        );
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "text/xml;charset=UTF-8")],
            body,
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// `POST /`: a CloudWatch Logs call when it names its operation in `X-Amz-Target` (JSON
/// protocol), else an EC2 Query API call.
async fn endpoint(
    State(sim): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if headers.contains_key("x-amz-target") {
        logs::endpoint(&sim, &method, &uri, &headers, &body).await
    } else {
        ec2_endpoint(State(sim), method, uri, headers, body).await
    }
}

/// `POST /` (and `GET /`): one EC2 Query API call.
async fn ec2_endpoint(
    State(sim): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let faults = sim.faults.apply().await;
    let result = async {
        signature::verify(
            &sim.credentials,
            &sim.region,
            signature::SERVICE,
            &method,
            &uri,
            &headers,
            &body,
            SystemTime::now(),
        )?;
        if faults.suspended {
            return Err(Ec2Error::new(
                StatusCode::FORBIDDEN,
                "Blocked",
                "This account is currently blocked and not recognized as a valid account. Please contact aws-verification@amazon.com if you have questions.",
            ));
        }
        if let Some(secs) = faults.rate_limited_secs {
            let mut err = Ec2Error::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "RequestLimitExceeded",
                "Request limit exceeded.",
            );
            err.retry_after = Some(secs);
            return Err(err);
        }
        if faults.failing {
            return Err(Ec2Error::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "An internal error has occurred",
            ));
        }
        let params = parameters(&uri, &headers, &body)?;
        dispatch(&sim, &params).await
    }
    .await;
    match result {
        Ok(xml) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/xml;charset=UTF-8")],
            xml,
        )
            .into_response(),
        Err(err) => {
            tracing::debug!(code = err.code, message = %err.message, "EC2 simulator error");
            err.into_response()
        }
    }
}

/// The request's parameters: the query string's, then the form body's.
fn parameters(
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<(String, String)>, Ec2Error> {
    let mut params: Vec<(String, String)> =
        form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    if !body.is_empty() {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        let mime = content_type.split(';').next().unwrap_or_default().trim();
        if !mime.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
            return Err(Ec2Error::bad_request(
                "InvalidParameterValue",
                format!(
                    "Unsupported content type '{content_type}': send the parameters as application/x-www-form-urlencoded"
                ),
            ));
        }
        params.extend(form_urlencoded::parse(body).into_owned());
    }
    Ok(params)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// The members of list parameter `prefix` (`Prefix.N...`), by index, each with the rest of its
/// parameters' names (`InstanceId.2` → `2: [("", value)]`, `Filter.1.Value.3` →
/// `1: [("Value.3", value)]`).
fn members(params: &[(String, String)], prefix: &str) -> BTreeMap<u32, Vec<(String, String)>> {
    let mut out: BTreeMap<u32, Vec<(String, String)>> = BTreeMap::new();
    for (key, value) in params {
        let Some(rest) = key
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('.'))
        else {
            continue;
        };
        let (index, rest) = rest.split_once('.').unwrap_or((rest, ""));
        if let Ok(index) = index.parse::<u32>() {
            out.entry(index)
                .or_default()
                .push((rest.to_owned(), value.clone()));
        }
    }
    out
}

/// The values of a flat list parameter (`InstanceId.1`, `InstanceId.2`, ...), in index order.
fn list(params: &[(String, String)], prefix: &str) -> Vec<String> {
    members(params, prefix)
        .into_values()
        .flat_map(|fields| {
            fields
                .into_iter()
                .filter(|(rest, _)| rest.is_empty())
                .map(|(_, value)| value)
        })
        .collect()
}

async fn dispatch(sim: &Shared, params: &[(String, String)]) -> Result<String, Ec2Error> {
    let action = param(params, "Action").ok_or_else(|| {
        Ec2Error::bad_request(
            "MissingAction",
            "The request must contain the parameter Action",
        )
    })?;
    let version = param(params, "Version").ok_or_else(|| Ec2Error::missing_parameter("Version"))?;
    if version != API_VERSION {
        return Err(Ec2Error::bad_request(
            "NoSuchVersion",
            format!("The requested version ({version}) of service AmazonEC2 does not exist"),
        ));
    }
    sim.ec2.lock().expect("not poisoned").purge();
    match action {
        "RunInstances" => run_instances(sim, params).await,
        "DescribeInstances" => describe_instances(sim, params),
        "TerminateInstances" => terminate_instances(sim, params),
        "DescribeAvailabilityZones" => Ok(describe_availability_zones(sim)),
        other => Err(Ec2Error::bad_request(
            "InvalidAction",
            format!("The action {other} is not valid for this web service."),
        )),
    }
}

/// What `RunInstances` asks for, validated.
struct Launch {
    image_id: String,
    instance_type: String,
    client_token: Option<String>,
    tags: Vec<(String, String)>,
    /// The parameters that must match when the client token is used again.
    fingerprint: String,
}

fn launch_request(params: &[(String, String)]) -> Result<Launch, Ec2Error> {
    let image_id =
        param(params, "ImageId").ok_or_else(|| Ec2Error::missing_parameter("ImageId"))?;
    if !image_id.starts_with("ami-") || image_id.len() < 5 {
        return Err(Ec2Error::bad_request(
            "InvalidAMIID.Malformed",
            format!("Invalid id: \"{image_id}\" (expecting \"ami-...\")"),
        ));
    }
    let instance_type = param(params, "InstanceType").unwrap_or("m1.small");
    if !instance_type_known(instance_type) {
        return Err(Ec2Error::invalid_value("InstanceType", instance_type));
    }
    for name in ["MinCount", "MaxCount"] {
        let value = param(params, name).ok_or_else(|| Ec2Error::missing_parameter(name))?;
        match value.parse::<u32>() {
            Ok(1) => {}
            Ok(0) => return Err(Ec2Error::invalid_value(name, value)),
            Ok(_) => {
                return Err(Ec2Error::bad_request(
                    "InvalidParameterValue",
                    format!(
                        "Invalid value '{value}' for {name}: this simulator launches one instance per call"
                    ),
                ));
            }
            Err(_) => return Err(Ec2Error::invalid_value(name, value)),
        }
    }
    let client_token = param(params, "ClientToken").map(str::to_owned);
    if let Some(token) = &client_token
        && (token.len() > MAX_CLIENT_TOKEN || !token.is_ascii())
    {
        return Err(Ec2Error::invalid_value("ClientToken", token));
    }
    let mut tags: Vec<(String, String)> = Vec::new();
    for (index, fields) in members(params, "TagSpecification") {
        let field = |name: &str| {
            fields
                .iter()
                .find(|(rest, _)| rest == name)
                .map(|(_, value)| value.as_str())
        };
        let resource_type = field("ResourceType").ok_or_else(|| {
            Ec2Error::missing_parameter(&format!("TagSpecification.{index}.ResourceType"))
        })?;
        if resource_type != "instance" {
            // Volumes, network interfaces...: nothing to tag in the simulator.
            continue;
        }
        for (tag_index, tag_fields) in members(&fields, "Tag") {
            let tag_field = |name: &str| {
                tag_fields
                    .iter()
                    .find(|(rest, _)| rest == name)
                    .map(|(_, value)| value.clone())
            };
            let key = tag_field("Key").ok_or_else(|| {
                Ec2Error::missing_parameter(&format!(
                    "TagSpecification.{index}.Tag.{tag_index}.Key"
                ))
            })?;
            let value = tag_field("Value").unwrap_or_default();
            if key.is_empty() || key.chars().count() > MAX_TAG_KEY {
                return Err(Ec2Error::bad_request(
                    "InvalidParameterValue",
                    format!("Tag key must be between 1 and {MAX_TAG_KEY} characters: '{key}'"),
                ));
            }
            if value.chars().count() > MAX_TAG_VALUE {
                return Err(Ec2Error::bad_request(
                    "InvalidParameterValue",
                    format!("Tag value exceeds the maximum length of {MAX_TAG_VALUE} characters"),
                ));
            }
            if key.to_ascii_lowercase().starts_with("aws:") {
                return Err(Ec2Error::bad_request(
                    "InvalidParameterValue",
                    "Tag keys starting with 'aws:' are reserved for internal use",
                ));
            }
            if tags.iter().any(|(existing, _)| *existing == key) {
                return Err(Ec2Error::bad_request(
                    "InvalidParameterValue",
                    format!("Duplicate tag key '{key}' specified."),
                ));
            }
            tags.push((key, value));
        }
    }
    if tags.len() > MAX_TAGS {
        return Err(Ec2Error::bad_request(
            "TagLimitExceeded",
            format!("The maximum number of tags per resource is {MAX_TAGS}."),
        ));
    }
    let mut fingerprint: Vec<&(String, String)> = params
        .iter()
        .filter(|(key, _)| key != "ClientToken")
        .collect();
    fingerprint.sort();
    Ok(Launch {
        image_id: image_id.to_owned(),
        instance_type: instance_type.to_owned(),
        client_token,
        tags,
        fingerprint: format!("{fingerprint:?}"),
    })
}

async fn run_instances(sim: &Shared, params: &[(String, String)]) -> Result<String, Ec2Error> {
    let launch = launch_request(params)?;
    let _launching = sim.launching.lock().await;
    if let Some(token) = &launch.client_token {
        let ec2 = sim.ec2.lock().expect("not poisoned");
        if let Some((fingerprint, instance_id)) = ec2.tokens.get(token) {
            if *fingerprint != launch.fingerprint {
                return Err(Ec2Error::bad_request(
                    "IdempotentParameterMismatch",
                    "The client token you have provided is associated with a resource that is already deleted or that was created with different parameters. Please use a new token.",
                ));
            }
            if let Some(instance) = ec2.instances.get(instance_id) {
                return Ok(run_instances_response(
                    instance,
                    instance.state,
                    &sim.region,
                ));
            }
        }
    }
    let id = format!("i-{}", &hex_id()[..17]);
    let port = launch
        .tags
        .iter()
        .find(|(key, _)| key == "bulkhead-port")
        .map(|(_, value)| {
            value
                .parse::<u16>()
                .map_err(|_| Ec2Error::invalid_value("Tag bulkhead-port", value))
        })
        .transpose()?
        .unwrap_or(DEFAULT_PORT);
    // The workload answers with the control plane's name of it (as a workload that knows
    // its instance key would), so that a client can tell which service answered; an
    // instance launched without one answers with its EC2 id.
    let answers_as = launch
        .tags
        .iter()
        .find(|(key, _)| key == "bulkhead-key")
        .map_or(id.as_str(), |(_, value)| value.as_str());
    let server = InstanceServer::start(answers_as, port).await.map_err(|err| {
        Ec2Error::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "InsufficientInstanceCapacity",
            format!("We currently do not have sufficient capacity in the Availability Zone you requested ({err})."),
        )
    })?;
    let SocketAddr::V4(addr) = server.addr else {
        unreachable!("instances listen on IPv4 loopback addresses")
    };
    let output = server.output().clone();
    sim.log_streams
        .lock()
        .expect("not poisoned")
        .insert(id.clone(), output.clone());
    let instance = Ec2Instance {
        id: id.clone(),
        reservation_id: format!("r-{}", &hex_id()[..17]),
        image_id: launch.image_id,
        instance_type: launch.instance_type,
        launch_time: SystemTime::now(),
        state: InstanceState::Running,
        private_ip: *addr.ip(),
        client_token: launch.client_token.clone().unwrap_or_default(),
        tags: launch.tags,
        server: Some(server),
        output,
        terminated_at: None,
    };
    tracing::info!(instance = %id, address = %addr, "EC2 simulator launched an instance");
    // EC2 answers a launch with the instance still pending.
    let xml = run_instances_response(&instance, InstanceState::Pending, &sim.region);
    let mut ec2 = sim.ec2.lock().expect("not poisoned");
    if let Some(token) = launch.client_token {
        ec2.tokens.insert(token, (launch.fingerprint, id.clone()));
    }
    ec2.launches.push(Instant::now());
    ec2.instances.insert(id, instance);
    Ok(xml)
}

fn run_instances_response(instance: &Ec2Instance, state: InstanceState, region: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<RunInstancesResponse xmlns=\"{NAMESPACE}\"><requestId>{}</requestId><reservationId>{}</reservationId><ownerId>{OWNER_ID}</ownerId><groupSet/><instancesSet>{}</instancesSet></RunInstancesResponse>",
        uuid::Uuid::new_v4(),
        instance.reservation_id,
        instance_xml(instance, state, region),
    )
}

/// One `instancesSet` item, as `state`, placed in the first zone of `region`.
fn instance_xml(instance: &Ec2Instance, state: InstanceState, region: &str) -> String {
    let mut xml = String::new();
    let _ = write!(
        xml,
        "<item><instanceId>{}</instanceId><imageId>{}</imageId><instanceState><code>{}</code><name>{}</name></instanceState>",
        instance.id,
        xml_escape(&instance.image_id),
        state.code(),
        state.name()
    );
    if state == InstanceState::Terminated {
        xml.push_str("<privateDnsName/><dnsName/><reason>User initiated</reason>");
    } else {
        let ip = instance.private_ip.to_string().replace('.', "-");
        let _ = write!(
            xml,
            "<privateDnsName>ip-{ip}.ec2.internal</privateDnsName><dnsName/><reason/>"
        );
    }
    let _ = write!(
        xml,
        "<amiLaunchIndex>0</amiLaunchIndex><productCodes/><instanceType>{}</instanceType><launchTime>{}</launchTime><placement><availabilityZone>{}a</availabilityZone><groupName/><tenancy>default</tenancy></placement><monitoring><state>disabled</state></monitoring>",
        xml_escape(&instance.instance_type),
        iso8601(instance.launch_time),
        xml_escape(region)
    );
    if state != InstanceState::Terminated {
        let _ = write!(
            xml,
            "<privateIpAddress>{}</privateIpAddress>",
            instance.private_ip
        );
    }
    let _ = write!(
        xml,
        "<groupSet/><architecture>x86_64</architecture><rootDeviceType>ebs</rootDeviceType><rootDeviceName>/dev/xvda</rootDeviceName><virtualizationType>hvm</virtualizationType><clientToken>{}</clientToken>",
        xml_escape(&instance.client_token)
    );
    if !instance.tags.is_empty() {
        xml.push_str("<tagSet>");
        for (key, value) in &instance.tags {
            let _ = write!(
                xml,
                "<item><key>{}</key><value>{}</value></item>",
                xml_escape(key),
                xml_escape(value)
            );
        }
        xml.push_str("</tagSet>");
    }
    xml.push_str("<hypervisor>xen</hypervisor></item>");
    xml
}

/// One `DescribeInstances` filter: `Filter.N.Name` and its `Filter.N.Value.M`s.
struct Filter {
    name: String,
    values: Vec<String>,
}

impl Filter {
    fn matches(&self, instance: &Ec2Instance) -> bool {
        let any = |candidate: &str| self.values.iter().any(|value| glob(value, candidate));
        if let Some(key) = self.name.strip_prefix("tag:") {
            return instance
                .tags
                .iter()
                .any(|(tag, value)| tag == key && any(value));
        }
        match self.name.as_str() {
            "tag-key" => instance.tags.iter().any(|(tag, _)| any(tag)),
            "tag-value" => instance.tags.iter().any(|(_, value)| any(value)),
            "instance-state-name" => any(instance.state.name()),
            "instance-state-code" => any(&instance.state.code().to_string()),
            "instance-id" => any(&instance.id),
            "image-id" => any(&instance.image_id),
            "instance-type" => any(&instance.instance_type),
            "client-token" => any(&instance.client_token),
            _ => false,
        }
    }
}

const FILTER_NAMES: [&str; 8] = [
    "tag-key",
    "tag-value",
    "instance-state-name",
    "instance-state-code",
    "instance-id",
    "image-id",
    "instance-type",
    "client-token",
];

fn filters(params: &[(String, String)]) -> Result<Vec<Filter>, Ec2Error> {
    members(params, "Filter")
        .into_iter()
        .map(|(index, fields)| {
            let name = fields
                .iter()
                .find(|(rest, _)| rest == "Name")
                .map(|(_, value)| value.clone())
                .ok_or_else(|| Ec2Error::missing_parameter(&format!("Filter.{index}.Name")))?;
            let known = FILTER_NAMES.contains(&name.as_str())
                || name.strip_prefix("tag:").is_some_and(|key| !key.is_empty());
            if !known {
                return Err(Ec2Error::bad_request(
                    "InvalidParameterValue",
                    format!("The filter '{name}' is invalid"),
                ));
            }
            let values = list(&fields, "Value");
            if values.is_empty() {
                return Err(Ec2Error::bad_request(
                    "InvalidParameterCombination",
                    format!("The filter '{name}' requires at least one value"),
                ));
            }
            Ok(Filter { name, values })
        })
        .collect()
}

/// EC2's filter wildcards: `*` (any run) and `?` (any one character).
fn glob(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

fn valid_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|hex| {
        (hex.len() == 8 || hex.len() == 17) && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

/// The instances named by `InstanceId.N` (all of them when none is named).
fn selected<'a>(ec2: &'a Ec2, ids: &[String]) -> Result<Vec<&'a Ec2Instance>, Ec2Error> {
    if ids.is_empty() {
        return Ok(ec2.instances.values().collect());
    }
    if let Some(bad) = ids.iter().find(|id| !valid_instance_id(id)) {
        return Err(Ec2Error::bad_request(
            "InvalidInstanceID.Malformed",
            format!("Invalid id: \"{bad}\""),
        ));
    }
    let missing: Vec<&str> = ids
        .iter()
        .filter(|id| !ec2.instances.contains_key(*id))
        .map(String::as_str)
        .collect();
    match missing.as_slice() {
        [] => Ok(ids.iter().filter_map(|id| ec2.instances.get(id)).collect()),
        [one] => Err(Ec2Error::bad_request(
            "InvalidInstanceID.NotFound",
            format!("The instance ID '{one}' does not exist"),
        )),
        many => Err(Ec2Error::bad_request(
            "InvalidInstanceID.NotFound",
            format!("The instance IDs '{}' do not exist", many.join(", ")),
        )),
    }
}

fn describe_instances(sim: &Shared, params: &[(String, String)]) -> Result<String, Ec2Error> {
    let ids = list(params, "InstanceId");
    let filters = filters(params)?;
    let ec2 = sim.ec2.lock().expect("not poisoned");
    let mut found = selected(&ec2, &ids)?;
    found.retain(|instance| filters.iter().all(|filter| filter.matches(instance)));
    found.sort_by_key(|instance| instance.launch_time);
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeInstancesResponse xmlns=\"{NAMESPACE}\"><requestId>{}</requestId><reservationSet>",
        uuid::Uuid::new_v4()
    );
    for instance in found {
        let _ = write!(
            xml,
            "<item><reservationId>{}</reservationId><ownerId>{OWNER_ID}</ownerId><groupSet/><instancesSet>{}</instancesSet></item>",
            instance.reservation_id,
            instance_xml(instance, instance.state, &sim.region),
        );
    }
    xml.push_str("</reservationSet></DescribeInstancesResponse>");
    Ok(xml)
}

fn terminate_instances(sim: &Shared, params: &[(String, String)]) -> Result<String, Ec2Error> {
    let ids = list(params, "InstanceId");
    if ids.is_empty() {
        return Err(Ec2Error::missing_parameter("InstanceId"));
    }
    let mut ec2 = sim.ec2.lock().expect("not poisoned");
    selected(&ec2, &ids)?;
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<TerminateInstancesResponse xmlns=\"{NAMESPACE}\"><requestId>{}</requestId><instancesSet>",
        uuid::Uuid::new_v4()
    );
    for id in &ids {
        let instance = ec2.instances.get_mut(id).expect("checked above");
        let previous = instance.state;
        let current = if previous == InstanceState::Terminated {
            InstanceState::Terminated
        } else {
            // The server stops now; EC2 reports the first termination as shutting down.
            instance.server = None;
            instance.state = InstanceState::Terminated;
            instance.terminated_at = Some(Instant::now());
            tracing::info!(instance = %id, "EC2 simulator terminated an instance");
            InstanceState::ShuttingDown
        };
        let _ = write!(
            xml,
            "<item><instanceId>{id}</instanceId><currentState><code>{}</code><name>{}</name></currentState><previousState><code>{}</code><name>{}</name></previousState></item>",
            current.code(),
            current.name(),
            previous.code(),
            previous.name()
        );
    }
    xml.push_str("</instancesSet></TerminateInstancesResponse>");
    Ok(xml)
}

fn describe_availability_zones(sim: &Shared) -> String {
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeAvailabilityZonesResponse xmlns=\"{NAMESPACE}\"><requestId>{}</requestId><availabilityZoneInfo>",
        uuid::Uuid::new_v4()
    );
    let region = xml_escape(&sim.region);
    for (n, zone) in ["a", "b", "c"].into_iter().enumerate() {
        let _ = write!(
            xml,
            "<item><zoneName>{region}{zone}</zoneName><zoneState>available</zoneState><regionName>{region}</regionName><zoneId>sim-az{}</zoneId><zoneType>availability-zone</zoneType><optInStatus>opt-in-not-required</optInStatus><messageSet/></item>",
            n + 1
        );
    }
    xml.push_str("</availabilityZoneInfo></DescribeAvailabilityZonesResponse>");
    xml
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, EC2's `launchTime`.
fn iso8601(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time)
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// 32 random hex digits, for resource ids.
fn hex_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Whether EC2 has the instance type `name`: the current families this simulator knows, in
/// the sizes each has. Any other, as EC2 does, is `InvalidParameterValue`.
fn instance_type_known(name: &str) -> bool {
    const BURSTABLE: &[&str] = &["t2", "t3", "t3a", "t4g"];
    const BURSTABLE_SIZES: &[&str] = &[
        "nano", "micro", "small", "medium", "large", "xlarge", "2xlarge",
    ];
    const FIXED: &[&str] = &[
        "m1", "m5", "m6i", "m7i", "c5", "c6i", "c7i", "r5", "r6i", "r7i",
    ];
    const FIXED_SIZES: &[&str] = &[
        "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
        "32xlarge", "48xlarge",
    ];
    match name.split_once('.') {
        Some(("m1", size)) => ["small", "medium", "large", "xlarge"].contains(&size),
        Some((family, size)) if BURSTABLE.contains(&family) => BURSTABLE_SIZES.contains(&size),
        Some((family, size)) if FIXED.contains(&family) => FIXED_SIZES.contains(&size),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    //! Tests against the running simulator over HTTP, the requests signed by `aws-sigv4`.

    use std::time::UNIX_EPOCH;

    use super::*;

    const AKID: &str = "AKIDSIMULATOR";
    const SECRET: &str = "sim/Secret+Access/KEY";
    const REGION: &str = "eu-west-1";

    #[test]
    fn launch_times_and_filters_read_as_ec2s() {
        let at = UNIX_EPOCH + Duration::from_millis(1_709_251_199_250);
        assert_eq!(iso8601(at), "2024-02-29T23:59:59.250Z");
        assert!(glob("web-*", "web-1") && glob("w?b-1", "web-1") && !glob("web-?", "web-12"));
    }

    async fn start() -> AwsSimulator {
        AwsSimulator::start(
            "127.0.0.1:0".parse().unwrap(),
            REGION,
            AwsCredentials {
                access_key_id: AKID.into(),
                secret_access_key: SECRET.into(),
            },
        )
        .await
        .unwrap()
    }

    /// How a test request is signed.
    struct Signing<'a> {
        akid: &'a str,
        secret: &'a str,
        region: &'a str,
        at: SystemTime,
    }

    const RIGHT: Signing<'static> = Signing {
        akid: AKID,
        secret: SECRET,
        region: REGION,
        at: UNIX_EPOCH, // replaced by now
    };

    fn now() -> Signing<'static> {
        Signing {
            at: SystemTime::now(),
            ..RIGHT
        }
    }

    fn form(params: &[(&str, &str)]) -> String {
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish()
    }

    /// POSTs `body` signed with `signing` (the body sent may differ: `sent`).
    async fn post_signed(
        sim: &AwsSimulator,
        body: &str,
        sent: &str,
        signing: &Signing<'_>,
    ) -> (u16, HeaderMap, String) {
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let url = format!("{}/", sim.url());
        let signing = signature::sign_for_test(
            &AwsCredentials {
                access_key_id: signing.akid.into(),
                secret_access_key: signing.secret.into(),
            },
            signing.region,
            signature::SERVICE,
            &url,
            &[("content-type", content_type)],
            body.as_bytes(),
            signing.at,
        );
        let mut request = crate::test_http()
            .post(url)
            .header("content-type", content_type)
            .body(sent.to_owned());
        for (name, value) in signing {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.text().await.unwrap())
    }

    async fn ec2(sim: &AwsSimulator, params: &[(&str, &str)]) -> (u16, String) {
        let body = form(params);
        let (status, _, text) = post_signed(sim, &body, &body, &now()).await;
        (status, text)
    }

    fn assert_error(answer: &(u16, String), status: u16, code: &str) {
        let (got_status, body) = answer;
        assert_eq!(*got_status, status, "{body}");
        let prefix = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>"
        );
        assert!(body.starts_with(&prefix), "{body}");
        assert!(
            body.contains("</Message></Error></Errors><RequestID>"),
            "{body}"
        );
        assert!(body.ends_with("</RequestID></Response>"), "{body}");
    }

    fn text_of<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        xml.match_indices(&open)
            .filter_map(|(at, _)| {
                let rest = &xml[at + open.len()..];
                rest.find(&close).map(|end| &rest[..end])
            })
            .collect()
    }

    const ZONES: &[(&str, &str)] = &[
        ("Action", "DescribeAvailabilityZones"),
        ("Version", API_VERSION),
    ];

    #[tokio::test]
    async fn a_correctly_signed_request_succeeds() {
        let sim = start().await;
        let (status, text) = ec2(&sim, ZONES).await;
        assert_eq!(status, 200, "{text}");
        assert!(text.starts_with(&format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DescribeAvailabilityZonesResponse xmlns=\"{NAMESPACE}\">"
        )));
        assert_eq!(
            text_of(&text, "zoneName"),
            ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
        );
        assert_eq!(text_of(&text, "regionName")[0], REGION);
    }

    #[tokio::test]
    async fn wrong_credentials_and_tampering_are_refused_as_ec2_does() {
        let sim = start().await;
        let body = form(ZONES);
        let answer = |(status, _, text): (u16, HeaderMap, String)| (status, text);

        let wrong_secret = Signing {
            secret: "not-the-secret",
            ..now()
        };
        let got = answer(post_signed(&sim, &body, &body, &wrong_secret).await);
        assert_error(&got, 403, "SignatureDoesNotMatch");
        assert!(!got.1.contains(SECRET));

        let unknown_key = Signing {
            akid: "AKIDSOMEONEELSE",
            ..now()
        };
        assert_error(
            &answer(post_signed(&sim, &body, &body, &unknown_key).await),
            401,
            "AuthFailure",
        );

        let tampered = form(&[
            ("Action", "TerminateInstances"),
            ("Version", API_VERSION),
            ("InstanceId.1", "i-0123456789abcdef0"),
        ]);
        assert_error(
            &answer(post_signed(&sim, &body, &tampered, &now()).await),
            403,
            "SignatureDoesNotMatch",
        );

        let other_region = Signing {
            region: "us-east-1",
            ..now()
        };
        let got = answer(post_signed(&sim, &body, &body, &other_region).await);
        assert_error(&got, 403, "SignatureDoesNotMatch");
        assert!(got.1.contains("scoped to a valid region"), "{}", got.1);

        let stale = Signing {
            at: SystemTime::now() - Duration::from_secs(6 * 60),
            ..now()
        };
        assert_error(
            &answer(post_signed(&sim, &body, &body, &stale).await),
            400,
            "RequestExpired",
        );
        let early = Signing {
            at: SystemTime::now() + Duration::from_secs(6 * 60),
            ..now()
        };
        assert_error(
            &answer(post_signed(&sim, &body, &body, &early).await),
            400,
            "RequestExpired",
        );

        let response = crate::test_http()
            .post(format!("{}/", sim.url()))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        assert_error(
            &(status, response.text().await.unwrap()),
            401,
            "MissingAuthenticationToken",
        );

        let response = crate::test_http()
            .post(format!("{}/", sim.url()))
            .header("authorization", "Bearer abc")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        assert_error(
            &(status, response.text().await.unwrap()),
            400,
            "IncompleteSignature",
        );
    }

    #[tokio::test]
    async fn bad_calls_get_ec2s_errors() {
        let sim = start().await;
        assert_error(
            &ec2(
                &sim,
                &[("Action", "RebootInstances"), ("Version", API_VERSION)],
            )
            .await,
            400,
            "InvalidAction",
        );
        assert_error(
            &ec2(&sim, &[("Action", "DescribeInstances")]).await,
            400,
            "MissingParameter",
        );
        assert_error(
            &ec2(
                &sim,
                &[
                    ("Action", "DescribeInstances"),
                    ("Version", API_VERSION),
                    ("InstanceId.1", "i-0123456789abcdef0"),
                ],
            )
            .await,
            400,
            "InvalidInstanceID.NotFound",
        );
        assert_error(
            &ec2(
                &sim,
                &[
                    ("Action", "DescribeInstances"),
                    ("Version", API_VERSION),
                    ("InstanceId.1", "web-1"),
                ],
            )
            .await,
            400,
            "InvalidInstanceID.Malformed",
        );
        assert_error(
            &ec2(
                &sim,
                &[
                    ("Action", "DescribeInstances"),
                    ("Version", API_VERSION),
                    ("Filter.1.Name", "flavour"),
                    ("Filter.1.Value.1", "x"),
                ],
            )
            .await,
            400,
            "InvalidParameterValue",
        );
        assert_error(
            &ec2(
                &sim,
                &[
                    ("Action", "RunInstances"),
                    ("Version", API_VERSION),
                    ("MinCount", "1"),
                    ("MaxCount", "1"),
                ],
            )
            .await,
            400,
            "MissingParameter",
        );
        assert_eq!(sim.instance_count(), 0);
    }

    fn run_params<'a>(token: &'a str, key: &'a str, port: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![
            ("Action", "RunInstances"),
            ("Version", API_VERSION),
            ("ImageId", "ami-0bulkhead"),
            ("InstanceType", "t3.micro"),
            ("MinCount", "1"),
            ("MaxCount", "1"),
            ("ClientToken", token),
            ("TagSpecification.1.ResourceType", "instance"),
            ("TagSpecification.1.Tag.1.Key", "bulkhead-key"),
            ("TagSpecification.1.Tag.1.Value", key),
            ("TagSpecification.1.Tag.2.Key", "bulkhead-managed"),
            ("TagSpecification.1.Tag.2.Value", "true"),
            ("TagSpecification.1.Tag.3.Key", "bulkhead-port"),
            ("TagSpecification.1.Tag.3.Value", port),
        ]
    }

    async fn fetch(url: &str) -> Result<String, reqwest::Error> {
        crate::test_http()
            .get(url)
            .timeout(Duration::from_secs(2))
            .send()
            .await?
            .text()
            .await
    }

    #[tokio::test]
    async fn instances_live_answer_and_terminate_with_ec2_semantics() {
        let sim = start().await;
        let (status, made) = ec2(&sim, &run_params("web-1", "web-1", "18080")).await;
        assert_eq!(status, 200, "{made}");
        assert!(made.contains(&format!("<RunInstancesResponse xmlns=\"{NAMESPACE}\">")));
        assert_eq!(text_of(&made, "name"), ["pending"]);
        let id = text_of(&made, "instanceId")[0].to_owned();
        assert!(valid_instance_id(&id), "{id}");
        let ip = text_of(&made, "privateIpAddress")[0].to_owned();
        assert_eq!(
            text_of(&made, "key"),
            ["bulkhead-key", "bulkhead-managed", "bulkhead-port"]
        );
        assert_eq!(sim.instance_count(), 1);

        // The instance is real: it answers at its address and port, with its `bulkhead-key`.
        let answer = fetch(&format!("http://{ip}:18080/")).await.unwrap();
        assert_eq!(answer, "{\"instance\":\"web-1\"}\n");

        // The same client token is the same instance; with other parameters, a mismatch.
        let (_, again) = ec2(&sim, &run_params("web-1", "web-1", "18080")).await;
        assert_eq!(text_of(&again, "instanceId"), [id.as_str()]);
        assert_eq!(sim.instance_count(), 1);
        assert_error(
            &ec2(&sim, &run_params("web-1", "web-1", "18081")).await,
            400,
            "IdempotentParameterMismatch",
        );
        let (_, other) = ec2(&sim, &run_params("web-2", "web-2", "18080")).await;
        let other_id = text_of(&other, "instanceId")[0].to_owned();
        assert_ne!(other_id, id);
        assert_eq!(sim.instance_count(), 2);

        // Filters: tag:KEY, tag-key, instance-state-name.
        let describe = |filters: Vec<(&'static str, &'static str)>| {
            let mut params = vec![("Action", "DescribeInstances"), ("Version", API_VERSION)];
            params.extend(filters);
            params
        };
        let (status, found) = ec2(
            &sim,
            &describe(vec![
                ("Filter.1.Name", "tag:bulkhead-key"),
                ("Filter.1.Value.1", "web-1"),
                ("Filter.2.Name", "instance-state-name"),
                ("Filter.2.Value.1", "pending"),
                ("Filter.2.Value.2", "running"),
            ]),
        )
        .await;
        assert_eq!(status, 200, "{found}");
        assert!(found.contains(&format!(
            "<DescribeInstancesResponse xmlns=\"{NAMESPACE}\">"
        )));
        assert!(found.contains("<reservationSet><item><reservationId>r-"));
        assert_eq!(text_of(&found, "instanceId"), [id.as_str()]);
        assert_eq!(text_of(&found, "name"), ["running"]);
        assert_eq!(text_of(&found, "privateIpAddress"), [ip.as_str()]);
        let (_, all) = ec2(
            &sim,
            &describe(vec![
                ("Filter.1.Name", "tag-key"),
                ("Filter.1.Value.1", "bulkhead-*"),
            ]),
        )
        .await;
        assert_eq!(text_of(&all, "instanceId").len(), 2);
        let (_, none) = ec2(
            &sim,
            &describe(vec![
                ("Filter.1.Name", "tag:bulkhead-key"),
                ("Filter.1.Value.1", "web-9"),
            ]),
        )
        .await;
        assert!(none.contains("<reservationSet></reservationSet>"), "{none}");

        // Terminating stops the server; the instance is still described, as terminated.
        let (status, gone) = ec2(
            &sim,
            &[
                ("Action", "TerminateInstances"),
                ("Version", API_VERSION),
                ("InstanceId.1", &id),
            ],
        )
        .await;
        assert_eq!(status, 200, "{gone}");
        assert!(gone.contains(&format!(
            "<TerminateInstancesResponse xmlns=\"{NAMESPACE}\">"
        )));
        assert_eq!(text_of(&gone, "name"), ["shutting-down", "running"]);
        assert_eq!(sim.instance_count(), 1);
        let mut stopped = false;
        for _ in 0..50 {
            if fetch(&format!("http://{ip}:18080/")).await.is_err() {
                stopped = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(stopped, "the terminated instance still answers");
        let (_, described) = ec2(&sim, &describe(vec![])).await;
        assert!(described.contains(&format!("<instanceId>{id}</instanceId>")));
        let (_, by_id) = ec2(
            &sim,
            &[
                ("Action", "DescribeInstances"),
                ("Version", API_VERSION),
                ("InstanceId.1", &id),
            ],
        )
        .await;
        assert_eq!(text_of(&by_id, "name"), ["terminated"]);
        assert!(text_of(&by_id, "privateIpAddress").is_empty());
        let (_, live) = ec2(
            &sim,
            &describe(vec![
                ("Filter.1.Name", "instance-state-name"),
                ("Filter.1.Value.1", "running"),
            ]),
        )
        .await;
        assert_eq!(text_of(&live, "instanceId"), [other_id.as_str()]);

        // Terminating again succeeds; the token still names the terminated instance (EC2).
        let (status, twice) = ec2(
            &sim,
            &[
                ("Action", "TerminateInstances"),
                ("Version", API_VERSION),
                ("InstanceId.1", &id),
            ],
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(text_of(&twice, "name"), ["terminated", "terminated"]);
        let (_, reused) = ec2(&sim, &run_params("web-1", "web-1", "18080")).await;
        assert_eq!(text_of(&reused, "instanceId"), [id.as_str()]);
        assert_eq!(text_of(&reused, "name"), ["terminated"]);
        assert_eq!(sim.instance_count(), 1);
    }

    /// A CloudWatch Logs call signed for `service` (the right one is `logs`).
    async fn logs_call_as(
        sim: &AwsSimulator,
        target: &str,
        body: &serde_json::Value,
        service: &str,
        akid: &str,
    ) -> (u16, HeaderMap, serde_json::Value) {
        let content_type = "application/x-amz-json-1.1";
        let url = format!("{}/", sim.url());
        let body = body.to_string();
        let headers = [("content-type", content_type), ("x-amz-target", target)];
        let signing = signature::sign_for_test(
            &AwsCredentials {
                access_key_id: akid.into(),
                secret_access_key: SECRET.into(),
            },
            REGION,
            service,
            &url,
            &headers,
            body.as_bytes(),
            SystemTime::now(),
        );
        let mut request = crate::test_http().post(url).body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        for (name, value) in signing {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.json().await.unwrap())
    }

    async fn get_log_events(
        sim: &AwsSimulator,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let (status, _, answer) =
            logs_call_as(sim, "Logs_20140328.GetLogEvents", &body, "logs", AKID).await;
        (status, answer)
    }

    fn messages(answer: &serde_json::Value) -> Vec<String> {
        answer["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|event| event["message"].as_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn log_events_are_read_forward_backward_and_from_the_newest() {
        let sim = start().await;
        let (status, made) = ec2(&sim, &run_params("web-1", "web-1", "0")).await;
        assert_eq!(status, 200, "{made}");
        let id = sim.instance_id("web-1").unwrap();
        let output = sim.instance_output("web-1").unwrap();
        let at = SystemTime::now() + Duration::from_secs(1);
        for n in 0..10 {
            // Pairs of lines share a millisecond.
            let time = at + Duration::from_millis(n / 2);
            output.print_at(time, OutputStream::Stdout, &format!("out {n}"));
        }
        assert!(sim.instance_print("web-1", OutputStream::Stderr, "err 0"));
        let stdout = format!("{id}/stdout");
        let mut expected = vec![output.lines()[0].text.clone()];
        expected.extend((0..10).map(|n| format!("out {n}")));

        // From the head, three at a time, until the forward token comes back unchanged.
        let mut read = Vec::new();
        let mut query = serde_json::json!({
            "logGroupName": LOG_GROUP, "logStreamName": stdout, "startFromHead": true, "limit": 3,
        });
        loop {
            let (status, page) = get_log_events(&sim, query.clone()).await;
            assert_eq!(status, 200, "{page}");
            let next = page["nextForwardToken"].as_str().unwrap().to_owned();
            assert!(next.starts_with("f/") && next.ends_with("/s"), "{next}");
            if query["nextToken"].as_str() == Some(next.as_str()) {
                assert!(messages(&page).is_empty());
                break;
            }
            read.extend(messages(&page));
            query["nextToken"] = serde_json::json!(next);
        }
        assert_eq!(read, expected);
        // A line printed later is read from the last token.
        output.print_at(at + Duration::from_secs(1), OutputStream::Stdout, "late");
        let (_, page) = get_log_events(&sim, query.clone()).await;
        assert_eq!(messages(&page), ["late"]);
        let event = &page["events"][0];
        assert!(event["timestamp"].as_u64().unwrap() <= event["ingestionTime"].as_u64().unwrap());

        // Without a token and not from the head: the newest, oldest first; then backward.
        let newest = serde_json::json!({
            "logGroupName": LOG_GROUP, "logStreamName": stdout, "limit": 2,
        });
        let (_, page) = get_log_events(&sim, newest.clone()).await;
        assert_eq!(messages(&page), ["out 9", "late"]);
        let mut back = newest.clone();
        back["nextToken"] = page["nextBackwardToken"].clone();
        let (_, page) = get_log_events(&sim, back).await;
        assert_eq!(messages(&page), ["out 7", "out 8"]);
        // From a time on.
        let since = at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 + 4;
        let mut from = newest.clone();
        from["startTime"] = serde_json::json!(since);
        from["startFromHead"] = serde_json::json!(true);
        let (_, page) = get_log_events(&sim, from).await;
        assert_eq!(messages(&page), ["out 8", "out 9"]);

        let mut stderr = newest.clone();
        stderr["logStreamName"] = serde_json::json!(format!("{id}/stderr"));
        let (_, page) = get_log_events(&sim, stderr).await;
        assert_eq!(messages(&page), ["err 0"]);

        // Streams outlive their instance.
        let (status, _) = ec2(
            &sim,
            &[
                ("Action", "TerminateInstances"),
                ("Version", API_VERSION),
                ("InstanceId.1", &id),
            ],
        )
        .await;
        assert_eq!(status, 200);
        let (_, page) = get_log_events(&sim, newest).await;
        assert_eq!(messages(&page), ["out 9", "late"]);
    }

    #[tokio::test]
    async fn logs_calls_are_refused_as_cloudwatch_logs_refuses_them() {
        let sim = start().await;
        let (status, _) = ec2(&sim, &run_params("web-1", "web-1", "0")).await;
        assert_eq!(status, 200);
        let id = sim.instance_id("web-1").unwrap();
        let ok =
            serde_json::json!({"logGroupName": LOG_GROUP, "logStreamName": format!("{id}/stdout")});
        let target = "Logs_20140328.GetLogEvents";
        let kind = |answer: &serde_json::Value| answer["__type"].as_str().unwrap().to_owned();

        for (field, value, expected) in [
            (
                "logGroupName",
                serde_json::json!("other"),
                "ResourceNotFoundException",
            ),
            (
                "logStreamName",
                serde_json::json!("i-0/stdout"),
                "ResourceNotFoundException",
            ),
            (
                "logStreamName",
                serde_json::json!(format!("{id}/system")),
                "ResourceNotFoundException",
            ),
            (
                "limit",
                serde_json::json!(10_001),
                "InvalidParameterException",
            ),
            (
                "nextToken",
                serde_json::json!("f/1/s"),
                "InvalidParameterException",
            ),
        ] {
            let mut bad = ok.clone();
            bad[field] = value;
            let (status, answer) = get_log_events(&sim, bad).await;
            assert_eq!(
                (status, kind(&answer)),
                (400, expected.to_owned()),
                "{field}"
            );
        }
        let (_, answer) = get_log_events(&sim, serde_json::json!({"logGroupName": "x"})).await;
        assert_eq!(kind(&answer), "InvalidParameterException");

        let (status, _, answer) = logs_call_as(&sim, target, &ok, "ec2", AKID).await;
        assert_eq!(
            (status, kind(&answer)),
            (400, "InvalidSignatureException".to_owned())
        );
        let (status, _, answer) = logs_call_as(&sim, target, &ok, "logs", "AKIDOTHER").await;
        assert_eq!(
            (status, kind(&answer)),
            (400, "UnrecognizedClientException".to_owned())
        );
        let (status, _, answer) =
            logs_call_as(&sim, "Logs_20140328.DeleteLogGroup", &ok, "logs", AKID).await;
        assert_eq!(
            (status, kind(&answer)),
            (400, "UnknownOperationException".to_owned())
        );

        sim.faults.set(crate::faults::FaultState {
            suspended: true,
            ..Default::default()
        });
        let (status, answer) = get_log_events(&sim, ok.clone()).await;
        assert_eq!(
            (status, kind(&answer)),
            (400, "AccessDeniedException".to_owned())
        );
        assert!(answer["message"].as_str().unwrap().contains("blocked"));
        sim.faults.set(crate::faults::FaultState {
            rate_limited_secs: Some(4),
            ..Default::default()
        });
        let (status, headers, answer) = logs_call_as(&sim, target, &ok, "logs", AKID).await;
        assert_eq!(
            (status, kind(&answer)),
            (400, "ThrottlingException".to_owned())
        );
        assert_eq!(headers.get("retry-after").unwrap(), "4");
        sim.faults.set(crate::faults::FaultState {
            failing: true,
            ..Default::default()
        });
        let (status, answer) = get_log_events(&sim, ok).await;
        assert_eq!(
            (status, kind(&answer)),
            (500, "ServiceUnavailableException".to_owned())
        );
    }

    #[tokio::test]
    async fn faults_are_reported_as_ec2_reports_them() {
        let sim = start().await;
        let client = crate::test_http();
        let set = |state: serde_json::Value| {
            let client = client.clone();
            let url = format!("{}/_sim/faults", sim.url());
            async move {
                let response = client.put(url).json(&state).send().await.unwrap();
                assert_eq!(response.status().as_u16(), 200);
            }
        };

        set(serde_json::json!({"suspended": true})).await;
        let blocked = ec2(&sim, ZONES).await;
        assert_error(&blocked, 403, "Blocked");
        assert!(blocked.1.contains(
            "This account is currently blocked and not recognized as a valid account. Please contact aws-verification@amazon.com if you have questions."
        ));
        // Credentials are still checked first.
        let body = form(ZONES);
        let wrong = Signing {
            akid: "AKIDOTHER",
            ..now()
        };
        let (status, _, _) = post_signed(&sim, &body, &body, &wrong).await;
        assert_eq!(status, 401);

        set(serde_json::json!({"rate_limited_secs": 7})).await;
        let (status, headers, text) = post_signed(&sim, &body, &body, &now()).await;
        assert_error(&(status, text.clone()), 503, "RequestLimitExceeded");
        assert!(text.contains("Request limit exceeded."));
        assert_eq!(headers.get("retry-after").unwrap(), "7");

        sim.faults.set(crate::faults::FaultState {
            failing: true,
            ..Default::default()
        });
        assert_error(&ec2(&sim, ZONES).await, 500, "InternalError");

        sim.faults.set(crate::faults::FaultState {
            latency_ms: 300,
            ..Default::default()
        });
        let started = Instant::now();
        assert_eq!(ec2(&sim, ZONES).await.0, 200);
        assert!(started.elapsed() >= Duration::from_millis(300));

        let response = client
            .post(format!("{}/_sim/recover", sim.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(sim.faults.now(), crate::faults::FaultState::default());
        assert_eq!(ec2(&sim, ZONES).await.0, 200);
    }
}
