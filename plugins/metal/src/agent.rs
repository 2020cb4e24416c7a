//! The client of one Bulkhead host agent's HTTP API (`bulkhead-agent`): the calls the plugin
//! makes, their wire types, and the agent's answers mapped to contract errors (401 →
//! unauthorized, 404 → not found, a network failure or 5xx → unavailable, and a full agent
//! told apart from other conflicts). Every error names the agent it came from.

use std::collections::BTreeMap;

use bulkhead_sdk::http::{Request, Response};
use bulkhead_sdk::{InstanceSize, InstanceSpec, LogLine, LogRequest, LogStream, ProviderError};
use serde::{Deserialize, Serialize};

/// A workload as the agent shows it (the fields the plugin uses).
#[derive(Debug, Clone, Deserialize)]
pub struct Workload {
    pub key: String,
    pub address: Option<String>,
    /// `preparing`, `starting`, `running`, `restarting`, `stopped` or `failed`.
    pub state: String,
    /// How its last process ended, or why its code could not be fetched or built.
    #[serde(default)]
    pub last_exit: Option<String>,
    /// What the agent's checks of it say (`pending`, `healthy`, `unhealthy`): absent when it
    /// was given no health check.
    #[serde(default)]
    pub health: Option<String>,
}

/// An agent's slots, and the CPU and memory it offers workloads' sizes: in all and free
/// (absent from an agent older than sizes, which counts slots only).
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Capacity {
    pub slots_total: u32,
    pub slots_used: u32,
    pub slots_free: u32,
    #[serde(default)]
    pub cpu_millis_total: Option<u32>,
    #[serde(default)]
    pub cpu_millis_free: Option<u32>,
    #[serde(default)]
    pub memory_mib_total: Option<u32>,
    #[serde(default)]
    pub memory_mib_free: Option<u32>,
}

impl Capacity {
    /// Whether a workload of `size` fits in what is free (an agent older than sizes: whether
    /// a slot is).
    pub fn fits(&self, size: &InstanceSize) -> bool {
        self.slots_free > 0
            && self
                .cpu_millis_free
                .is_none_or(|free| size.cpu_millis <= free)
            && self
                .memory_mib_free
                .is_none_or(|free| size.memory_mib <= free)
    }

    /// Whether a workload of `size` would fit were the agent empty.
    pub fn could_ever_fit(&self, size: &InstanceSize) -> bool {
        self.slots_total > 0
            && self
                .cpu_millis_total
                .is_none_or(|total| size.cpu_millis <= total)
            && self
                .memory_mib_total
                .is_none_or(|total| size.memory_mib <= total)
    }
}

#[derive(Deserialize)]
struct Items {
    items: Vec<Workload>,
}

#[derive(Serialize)]
struct PutWorkload<'a> {
    command: &'a str,
    env: BTreeMap<&'a str, &'a str>,
    port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    health_check: Option<WorkloadCheck<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<WorkloadSource<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<WorkloadSize>,
}

/// What the workload is given: the agent holds it to that with a cgroup.
#[derive(Serialize)]
struct WorkloadSize {
    cpu_millis: u32,
    memory_mib: u32,
}

/// Where the workload's code comes from: the agent fetches and builds it.
#[derive(Serialize)]
struct WorkloadSource<'a> {
    url: &'a str,
    commit: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    build: Option<&'a str>,
}

/// The service's health check, for the agent to make near the workload.
#[derive(Serialize)]
struct WorkloadCheck<'a> {
    path: &'a str,
    interval_ms: u32,
    timeout_ms: u32,
    healthy_threshold: u32,
    unhealthy_threshold: u32,
}

/// A page of a workload's output as the agent answers it.
#[derive(Debug, Deserialize)]
pub struct LogsPage {
    pub lines: Vec<AgentLine>,
    /// The number of the last line, to read on after.
    pub next: u64,
    pub gap: bool,
}

/// A line of a workload's output as the agent keeps it.
#[derive(Debug, Deserialize)]
pub struct AgentLine {
    pub time_ms: u64,
    /// `stdout`, `stderr` or `system`.
    pub stream: String,
    pub text: String,
}

impl From<AgentLine> for LogLine {
    fn from(line: AgentLine) -> Self {
        Self {
            time_ms: line.time_ms,
            stream: match line.stream.as_str() {
                "stderr" => LogStream::Stderr,
                "system" => LogStream::System,
                _ => LogStream::Stdout,
            },
            text: line.text,
        }
    }
}

#[derive(Deserialize)]
struct Problem {
    code: String,
}

/// What a `PUT` of a workload came to.
pub enum Placed {
    /// Started (or found: the agent returns an existing workload of the same key).
    Workload(Workload),
    /// The agent has no free slot.
    Full,
}

/// One agent, at its base URL (`http://10.0.0.2:7070`), with the fleet's token.
pub struct Agent<'a> {
    pub url: &'a str,
    pub token: &'a str,
}

impl Agent<'_> {
    fn workload_url(&self, key: &str) -> String {
        format!("{}/v1/workloads/{key}", self.url)
    }

    fn send(&self, request: Request) -> Result<Response, ProviderError> {
        request
            .bearer(self.token)
            .send()
            .map_err(|err| self.blame(err.into()))
    }

    /// The error with the agent's URL in its message.
    pub fn blame(&self, err: ProviderError) -> ProviderError {
        let at = |message: String| format!("agent {}: {message}", self.url);
        match err {
            ProviderError::Unauthorized(m) => ProviderError::Unauthorized(at(m)),
            ProviderError::Forbidden(m) => ProviderError::Forbidden(at(m)),
            ProviderError::Misconfigured(m) => ProviderError::Misconfigured(at(m)),
            ProviderError::AccountSuspended(m) => ProviderError::AccountSuspended(at(m)),
            ProviderError::RateLimited(mut limit) => {
                limit.message = at(limit.message);
                ProviderError::RateLimited(limit)
            }
            ProviderError::QuotaExceeded(m) => ProviderError::QuotaExceeded(at(m)),
            ProviderError::NotFound(m) => ProviderError::NotFound(at(m)),
            ProviderError::InvalidSpec(m) => ProviderError::InvalidSpec(at(m)),
            ProviderError::Unavailable(m) => ProviderError::Unavailable(at(m)),
            ProviderError::Internal(m) => ProviderError::Internal(at(m)),
        }
    }

    fn checked(&self, response: Response) -> Result<Response, ProviderError> {
        response.error_for_status().map_err(|err| self.blame(err))
    }

    /// `GET /v1/capacity`.
    pub fn capacity(&self) -> Result<Capacity, ProviderError> {
        let response = self.send(Request::get(format!("{}/v1/capacity", self.url)))?;
        self.checked(response)?
            .json()
            .map_err(|err| self.blame(err))
    }

    /// `GET /v1/workloads/{key}`; `None` when the agent does not have it.
    pub fn find(&self, key: &str) -> Result<Option<Workload>, ProviderError> {
        let response = self.send(Request::get(self.workload_url(key)))?;
        if response.status == 404 {
            return Ok(None);
        }
        self.checked(response)?
            .json()
            .map(Some)
            .map_err(|err| self.blame(err))
    }

    /// `GET /v1/workloads/{key}/logs` from the line after `after` (or from `request`'s time,
    /// or the newest lines); `None` when the agent does not have the workload.
    pub fn logs(
        &self,
        key: &str,
        after: Option<u64>,
        request: &LogRequest,
    ) -> Result<Option<LogsPage>, ProviderError> {
        let mut url = format!(
            "{}/logs?limit={}&max_bytes={}",
            self.workload_url(key),
            request.max_lines.clamp(1, 1000),
            request.max_bytes.max(1)
        );
        if let Some(after) = after {
            url.push_str(&format!("&after={after}"));
        } else if let Some(since) = request.since_ms {
            url.push_str(&format!("&since_ms={since}"));
        }
        let response = self.send(Request::get(url))?;
        if response.status == 404 {
            return Ok(None);
        }
        self.checked(response)?
            .json()
            .map(Some)
            .map_err(|err| self.blame(err))
    }

    /// `GET /v1/workloads`.
    pub fn list(&self) -> Result<Vec<Workload>, ProviderError> {
        let response = self.send(Request::get(format!("{}/v1/workloads", self.url)))?;
        let items: Items = self
            .checked(response)?
            .json()
            .map_err(|err| self.blame(err))?;
        Ok(items.items)
    }

    /// `PUT /v1/workloads/{key}`: starts the workload of `spec` (or returns the one of its
    /// key).
    pub fn put(&self, spec: &InstanceSpec) -> Result<Placed, ProviderError> {
        let key = spec.instance_key.as_str();
        // The workload learns its own key, as instances on the clouds do from their metadata.
        let mut env: BTreeMap<&str, &str> = spec
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.entry("BULKHEAD_INSTANCE_KEY").or_insert(key);
        let health_check = spec.health_check.as_ref().map(|check| WorkloadCheck {
            path: &check.path,
            interval_ms: check.interval_ms,
            timeout_ms: check.timeout_ms,
            healthy_threshold: check.healthy_threshold,
            unhealthy_threshold: check.unhealthy_threshold,
        });
        let mut body = PutWorkload {
            command: &spec.artifact,
            env,
            port: spec.port,
            health_check,
            source: spec.source.as_ref().map(|source| WorkloadSource {
                url: &source.url,
                commit: &source.commit,
                token: source.token.as_deref(),
                build: source.build.as_deref(),
            }),
            size: Some(WorkloadSize {
                cpu_millis: spec.size.cpu_millis,
                memory_mib: spec.size.memory_mib,
            }),
        };
        let mut response = self.send(Request::put(self.workload_url(key)).json(&body))?;
        if response.status == 400
            && body.source.is_some()
            && response.text().contains("unknown field `source`")
        {
            return Err(self.blame(ProviderError::InvalidSpec(
                "this agent is older than code built from a repository: upgrade it".into(),
            )));
        }
        if response.status == 400
            && body.health_check.is_some()
            && response.text().contains("unknown field `health_check`")
        {
            // An agent older than health checks near the workload: it runs the workload
            // without one (shown `unchecked`), and the control plane checks it itself.
            bulkhead_sdk::warn!(
                "{} does not make health checks (upgrade it): placing {key} without one",
                self.url
            );
            body.health_check = None;
            response = self.send(Request::put(self.workload_url(key)).json(&body))?;
        }
        if response.status == 400 && response.text().contains("unknown field `size`") {
            // An agent older than sizes holds no workload to one: it runs this one as it ran
            // every workload before, unheld.
            bulkhead_sdk::warn!(
                "{} does not hold workloads to their sizes (upgrade it): placing {key} unheld",
                self.url
            );
            body.size = None;
            response = self.send(Request::put(self.workload_url(key)).json(&body))?;
        }
        if response.status == 409 {
            let code = response.json::<Problem>().map(|problem| problem.code);
            return match code.as_deref() {
                Ok("capacity_exhausted") => Ok(Placed::Full),
                _ => Err(self.blame(ProviderError::Unavailable(format!(
                    "HTTP 409: {} (retry later)",
                    response.text()
                )))),
            };
        }
        self.checked(response)?
            .json()
            .map(Placed::Workload)
            .map_err(|err| self.blame(err))
    }

    /// `DELETE /v1/workloads/{key}` (the agent answers 204 for a workload it does not have).
    pub fn delete(&self, key: &str) -> Result<(), ProviderError> {
        let response = self.send(Request::delete(self.workload_url(key)))?;
        if response.status == 404 {
            return Ok(());
        }
        self.checked(response).map(drop)
    }
}
