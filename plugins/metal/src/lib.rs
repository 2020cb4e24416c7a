//! The `metal` provider plugin: the platform's own machines. Each runs a Bulkhead host agent
//! (`bulkhead-agent`), which runs workloads as supervised processes; this plugin places
//! instances on those agents over their HTTP API ([`agent`]) and finds them there again.
//!
//! Configuration: `agents` (comma-separated agent base URLs, e.g.
//! `http://127.0.0.1:7070,http://10.0.0.2:7070`; each must be on the provider's allowlist) and
//! `regions` (comma-separated, default `local`; every agent serves every region for now).
//! Secret: `agent_token` (the agents' bearer token).
//!
//! - An instance is the agent workload of the same key: `provider_id` is `AGENT_URL#key`,
//!   `address` the workload's, the artifact its command (split shell-style by the agent, which
//!   gives it its port in `PORT` and replaces `$PORT` in its words).
//! - Health checks near the workload (capability `health-checks`): the service's check goes to
//!   the agent with the workload; the agent makes it and shows the result, which `list` and
//!   `describe` report as the instance's `health`. `list` is what Bulkhead calls every second
//!   to learn them: one request per agent. An agent older than these checks refuses the
//!   check; the workload is placed there without one (`unchecked`: Bulkhead checks it).
//! - `provision` looks for the key on every agent first (idempotency), then places it on the
//!   agent with the most free slots. An agent that cannot be reached is skipped: a machine
//!   down must not stop placement on the others (were the key on it, `deprovision` deletes the
//!   key on every agent, so a duplicate does not outlive the instance).
//! - `describe` says `unavailable`, not `not-found`, when the key is on no reachable agent but
//!   some agent could not be asked; `deprovision` succeeds only once every agent has deleted
//!   it; `list` returns what the reachable agents run.
//! - A 401 from any agent is `unauthorized` (the token is wrong); every agent full is
//!   `quota-exceeded`; no agent reachable is `unavailable`.
//!
//! - Code from a repository (capability `git-source`): the spec's source goes to the agent,
//!   which fetches the commit, builds it and runs the command in it (`preparing` meanwhile,
//!   shown `pending`); a workload whose code could not be fetched or built is `failed`, with
//!   the agent's reason as the instance's `detail`.
//! - Logs (capability `logs`): the agent keeps each workload's output as numbered lines; the
//!   cursor is the number of the last line read. The agent that answered is remembered in the
//!   provider's cache for a day, so that following an instance asks that agent only.
//!
//! The agents are asked one after the other, within the call's deadline (10 s, 2 s for
//! `health`), so the fleet one provider serves should stay small or respond fast.

pub mod agent;

use agent::{Agent, Capacity, Placed, Workload};
use bulkhead_sdk::{
    ConfigKey, HealthReport, HealthStatus, Instance, InstanceSpec, InstanceState, LogPage,
    LogRequest, Provider, ProviderError, ProviderInfo, WorkloadHealth,
};

pub struct Metal;

/// The configured agents and the token they take.
struct Fleet {
    urls: Vec<String>,
    token: String,
}

impl Fleet {
    fn from_config() -> Result<Self, ProviderError> {
        let urls: Vec<String> = bulkhead_sdk::config_list("agents", &[])
            .into_iter()
            .map(|url| url.trim_end_matches('/').to_owned())
            .collect();
        if urls.is_empty() {
            return Err(ProviderError::InvalidSpec(
                "no agents configured: set `agents` to the agents' base URLs, comma-separated"
                    .into(),
            ));
        }
        let token = bulkhead_sdk::secret("agent_token")
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                ProviderError::Unauthorized("the `agent_token` secret is not set".into())
            })?;
        Ok(Self { urls, token })
    }

    fn agents(&self) -> impl Iterator<Item = Agent<'_>> {
        self.urls.iter().map(|url| Agent {
            url,
            token: &self.token,
        })
    }
}

/// The agents that could not be asked, and why.
#[derive(Default)]
struct Failures(Vec<ProviderError>);

impl Failures {
    /// Keeps `err` for later, unless it must end the call now: a refused token is the same
    /// for the whole fleet and takes the provider out of service.
    fn absorb(&mut self, err: ProviderError) -> Result<(), ProviderError> {
        match err {
            ProviderError::Unauthorized(_) => Err(err),
            other => {
                self.0.push(other);
                Ok(())
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn summary(&self) -> String {
        self.0.iter().map(message).collect::<Vec<_>>().join("; ")
    }

    /// The error of a call that no agent could answer: unavailable (retried later), unless
    /// an agent answered something unexpected (internal).
    fn into_error(self, what: &str) -> ProviderError {
        let summary = format!("{what}: {}", self.summary());
        if self
            .0
            .iter()
            .any(|err| matches!(err, ProviderError::Internal(_)))
        {
            ProviderError::Internal(summary)
        } else {
            ProviderError::Unavailable(summary)
        }
    }
}

fn message(err: &ProviderError) -> String {
    match err {
        ProviderError::Unauthorized(m)
        | ProviderError::Forbidden(m)
        | ProviderError::Misconfigured(m)
        | ProviderError::AccountSuspended(m)
        | ProviderError::QuotaExceeded(m)
        | ProviderError::NotFound(m)
        | ProviderError::InvalidSpec(m)
        | ProviderError::Unavailable(m)
        | ProviderError::Internal(m) => m.clone(),
        ProviderError::RateLimited(limit) => limit.message.clone(),
    }
}

fn regions() -> Vec<String> {
    bulkhead_sdk::config_list("regions", &["local"])
}

/// The region reported for instances found on an agent (agents do not keep one).
fn default_region() -> String {
    regions().swap_remove(0)
}

/// Whether `key` can be a workload key of an agent: 1–63 characters of `[a-z0-9-]`.
fn valid_key(key: &str) -> bool {
    (1..=63).contains(&key.len())
        && key
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

fn state_of(workload: &Workload) -> InstanceState {
    match workload.state.as_str() {
        "running" => InstanceState::Running,
        "stopped" => InstanceState::Stopped,
        "failed" => InstanceState::Failed,
        // `preparing`, `starting`, `restarting`, and anything newer.
        _ => InstanceState::Pending,
    }
}

/// What the agent's checks of the workload say; `unchecked` for a workload placed without
/// one (before contract 0.4.0), which the control plane then checks itself.
fn health_of(workload: &Workload) -> WorkloadHealth {
    match workload.health.as_deref() {
        None => WorkloadHealth::Unchecked,
        Some("healthy") => WorkloadHealth::Healthy,
        Some("unhealthy") => WorkloadHealth::Unhealthy,
        // `pending`, and anything newer.
        Some(_) => WorkloadHealth::Pending,
    }
}

fn instance(agent_url: &str, workload: Workload, region: String) -> Instance {
    let state = state_of(&workload);
    Instance {
        provider_id: format!("{agent_url}#{}", workload.key),
        health: health_of(&workload),
        // Why it failed: its code could not be fetched or built, or its command not started.
        detail: match state {
            InstanceState::Failed => workload.last_exit,
            _ => None,
        },
        state,
        instance_key: workload.key,
        region,
        address: workload.address,
        // A host agent has no machine types: it holds the workload to its size.
        machine_type: None,
    }
}

impl Provider for Metal {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "metal".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: regions(),
            // The agents check workloads where they run, with the service's health check, and
            // keep their output.
            // The agents fetch and build code from repositories.
            capabilities: vec!["health-checks".into(), "logs".into(), "git-source".into()],
            config: vec![
                ConfigKey::required("agents", "Comma-separated URLs of the host agents"),
                ConfigKey::optional("regions", "Comma-separated regions (default local)"),
                ConfigKey::secret("agent_token", "The agents' bearer token"),
            ],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        let fleet = Fleet::from_config()?;
        let mut failures = Failures::default();
        let (mut answering, mut free, mut total) = (0, 0, 0);
        let (mut cpu_free, mut memory_free) = (0u64, 0u64);
        for agent in fleet.agents() {
            match agent.capacity() {
                Ok(capacity) => {
                    answering += 1;
                    free += capacity.slots_free;
                    total += capacity.slots_total;
                    cpu_free += u64::from(capacity.cpu_millis_free.unwrap_or(0));
                    memory_free += u64::from(capacity.memory_mib_free.unwrap_or(0));
                }
                Err(err) => failures.absorb(err)?,
            }
        }
        let agents = fleet.urls.len();
        if answering == 0 {
            return Err(failures.into_error("no agent answers"));
        }
        let slots = format!("{free} of {total} slots, {cpu_free}m CPU and {memory_free} MiB free");
        Ok(if failures.is_empty() {
            HealthReport {
                status: HealthStatus::Healthy,
                message: format!("{agents} of {agents} agents answer; {slots}"),
            }
        } else {
            HealthReport {
                status: HealthStatus::Degraded,
                message: format!(
                    "{answering} of {agents} agents answer; {slots}; {}",
                    failures.summary()
                ),
            }
        })
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        if !regions().contains(&spec.region) {
            return Err(ProviderError::InvalidSpec(format!(
                "unknown region `{}` (this provider serves {})",
                spec.region,
                regions().join(", ")
            )));
        }
        if !valid_key(&spec.instance_key) {
            return Err(ProviderError::InvalidSpec(format!(
                "instance key `{}` is not 1 to 63 characters of `a-z`, `0-9` and `-`",
                spec.instance_key
            )));
        }
        let fleet = Fleet::from_config()?;
        let key = spec.instance_key.as_str();

        // Idempotency: the instance may have been made already.
        let mut failures = Failures::default();
        let mut reachable = Vec::new();
        for agent in fleet.agents() {
            match agent.find(key) {
                Ok(Some(workload)) => return Ok(instance(agent.url, workload, spec.region)),
                Ok(None) => reachable.push(agent),
                Err(err) => failures.absorb(err)?,
            }
        }
        if !failures.is_empty() {
            bulkhead_sdk::warn!(
                "placing {key} without asking every agent whether it runs it already: {}",
                failures.summary()
            );
        }

        // Placement: among the agents where the size fits, the one with the most CPU free,
        // then memory, then slots (the first configured among equals): instances spread.
        let size = spec.size;
        let mut candidates = Vec::new();
        for agent in reachable {
            match agent.capacity() {
                Ok(capacity) => candidates.push((agent, capacity)),
                Err(err) => failures.absorb(err)?,
            }
        }
        if candidates.is_empty() {
            return Err(failures.into_error(&format!("no agent can take {key}")));
        }
        let reachable = candidates.len();
        let roomiest = |capacity: &Capacity| {
            std::cmp::Reverse((
                capacity.cpu_millis_free,
                capacity.memory_mib_free,
                capacity.slots_free,
            ))
        };
        candidates.sort_by_key(|(_, capacity)| roomiest(capacity));
        let too_big = candidates
            .iter()
            .filter(|(_, capacity)| !capacity.could_ever_fit(&size))
            .count();
        let mut full = 0;
        for (agent, capacity) in &candidates {
            if !capacity.fits(&size) {
                full += 1;
                continue;
            }
            match agent.put(&spec) {
                Ok(Placed::Workload(workload)) => {
                    bulkhead_sdk::info!(
                        "placed {key} ({}m CPU, {} MiB) on {} ({} slots were free)",
                        size.cpu_millis,
                        size.memory_mib,
                        agent.url,
                        capacity.slots_free
                    );
                    return Ok(instance(agent.url, workload, spec.region));
                }
                // Taken meanwhile by another placement.
                Ok(Placed::Full) => full += 1,
                Err(err @ ProviderError::InvalidSpec(_)) => return Err(err),
                Err(err) => failures.absorb(err)?,
            }
        }
        if full == reachable {
            // Said without the agents' addresses: the control plane shows why an instance
            // waits to the service's owners.
            let needs = format!("{}m CPU and {} MiB", size.cpu_millis, size.memory_mib);
            let mut message = if too_big == reachable {
                format!("{needs} is more than any of the {reachable} reachable agents offers")
            } else {
                format!("none of the {reachable} reachable agents has {needs} free")
            };
            if let Some((_, most)) = candidates.first()
                && let (Some(cpu), Some(memory)) = (most.cpu_millis_free, most.memory_mib_free)
            {
                message = format!("{message} (the most free on one: {cpu}m CPU and {memory} MiB)");
            }
            if !failures.is_empty() {
                message = format!("{message}; {}", failures.summary());
            }
            return Err(ProviderError::QuotaExceeded(message));
        }
        Err(failures.into_error(&format!("placing {key} failed")))
    }

    fn deprovision(instance_key: String) -> Result<(), ProviderError> {
        if !valid_key(&instance_key) {
            return Ok(()); // no agent can have it
        }
        let fleet = Fleet::from_config()?;
        let mut failures = Failures::default();
        // On every agent: a duplicate left on an agent that was down at placement goes too.
        for agent in fleet.agents() {
            if let Err(err) = agent.delete(&instance_key) {
                failures.absorb(err)?;
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(ProviderError::Unavailable(format!(
                "{instance_key} may still run on an agent that could not be asked: {}",
                failures.summary()
            )))
        }
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        if !valid_key(&instance_key) {
            return Err(ProviderError::NotFound(format!(
                "no instance `{instance_key}`"
            )));
        }
        let fleet = Fleet::from_config()?;
        let mut failures = Failures::default();
        for agent in fleet.agents() {
            match agent.find(&instance_key) {
                Ok(Some(workload)) => return Ok(instance(agent.url, workload, default_region())),
                Ok(None) => {}
                Err(err) => failures.absorb(err)?,
            }
        }
        if failures.is_empty() {
            Err(ProviderError::NotFound(format!(
                "no agent runs `{instance_key}`"
            )))
        } else {
            // It may be on an agent that did not answer: not-found would be final.
            Err(failures.into_error(&format!(
                "`{instance_key}` is on no reachable agent, and some could not be asked"
            )))
        }
    }

    fn logs(instance_key: String, request: LogRequest) -> Result<LogPage, ProviderError> {
        if !valid_key(&instance_key) {
            return Err(ProviderError::NotFound(format!(
                "no instance `{instance_key}`"
            )));
        }
        let after = request
            .after
            .as_deref()
            .map(|cursor| {
                cursor.parse::<u64>().map_err(|_| {
                    ProviderError::InvalidSpec(format!("`{cursor}` is not a cursor of metal's"))
                })
            })
            .transpose()?;
        let fleet = Fleet::from_config()?;
        let remembered = format!("agent-of/{instance_key}");
        let known = bulkhead_sdk::cache::get_string(&remembered);
        // The agent that answered last first, then the others.
        let mut agents: Vec<Agent<'_>> = fleet.agents().collect();
        agents.sort_by_key(|agent| Some(agent.url) != known.as_deref());
        let mut failures = Failures::default();
        for agent in agents {
            match agent.logs(&instance_key, after, &request) {
                Ok(Some(page)) => {
                    if Some(agent.url) != known.as_deref() {
                        let day = std::time::Duration::from_secs(24 * 3600);
                        let _ = bulkhead_sdk::cache::set(&remembered, agent.url.as_bytes(), day);
                    }
                    return Ok(LogPage {
                        lines: page.lines.into_iter().map(Into::into).collect(),
                        next: page.next.to_string(),
                        gap: page.gap,
                    });
                }
                Ok(None) => {}
                Err(err) => failures.absorb(err)?,
            }
        }
        if failures.is_empty() {
            Err(ProviderError::NotFound(format!(
                "no agent runs `{instance_key}`"
            )))
        } else {
            Err(failures.into_error(&format!(
                "`{instance_key}` is on no reachable agent, and some could not be asked"
            )))
        }
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        let fleet = Fleet::from_config()?;
        let region = default_region();
        let mut failures = Failures::default();
        let mut instances = Vec::new();
        let mut answered = 0;
        for agent in fleet.agents() {
            match agent.list() {
                Ok(workloads) => {
                    answered += 1;
                    instances.extend(
                        workloads
                            .into_iter()
                            .map(|workload| instance(agent.url, workload, region.clone())),
                    );
                }
                Err(err) => failures.absorb(err)?,
            }
        }
        if answered == 0 {
            return Err(failures.into_error("no agent answers"));
        }
        if !failures.is_empty() {
            bulkhead_sdk::warn!(
                "listing without the agents that did not answer: {}",
                failures.summary()
            );
        }
        Ok(instances)
    }
}

bulkhead_sdk::export_provider!(Metal);

#[cfg(test)]
mod tests {
    //! A fake fleet behind `testing::set_http_handler`: each agent has its slots, workloads
    //! and whether it is reachable; every request is recorded.

    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use bulkhead_sdk::http::{HttpError, Method, Request, Response};
    use bulkhead_sdk::testing;
    use serde_json::{Value, json};

    use super::*;

    const TOKEN: &str = "fleet-token-0123456789";

    #[derive(Default)]
    struct FakeAgent {
        slots: u32,
        workloads: BTreeMap<String, Value>,
        unreachable: bool,
        token: Option<String>,
        /// Free slots to report instead of the truth (a placement race).
        reported_free: Option<u32>,
        /// An agent older than health checks: it refuses a workload that has one.
        before_checks: bool,
        /// An agent older than sizes (as every agent older than health checks is).
        before_sizes: bool,
        /// The CPU (millis) and memory (MiB) it offers; by default 1000m and 1 GiB a slot.
        room: Option<(u32, u32)>,
        /// The sizes of its workloads.
        sizes: BTreeMap<String, (u32, u32)>,
    }

    impl FakeAgent {
        fn offered(&self) -> (u32, u32) {
            self.room.unwrap_or((self.slots * 1000, self.slots * 1024))
        }

        fn free(&self) -> (u32, u32) {
            let (cpu, memory) = self.offered();
            self.sizes
                .values()
                .fold((cpu, memory), |(cpu, memory), size| {
                    (cpu.saturating_sub(size.0), memory.saturating_sub(size.1))
                })
        }
    }

    #[derive(Default)]
    struct FakeFleet {
        agents: BTreeMap<String, FakeAgent>,
        requests: Vec<(Method, String, Value)>,
    }

    type Shared = Rc<RefCell<FakeFleet>>;

    fn fleet(agents: &[(&str, u32)]) -> Shared {
        let fleet = Rc::new(RefCell::new(FakeFleet::default()));
        for (url, slots) in agents {
            fleet.borrow_mut().agents.insert(
                url.trim_end_matches('/').to_owned(),
                FakeAgent {
                    slots: *slots,
                    ..FakeAgent::default()
                },
            );
        }
        let urls: Vec<&str> = agents.iter().map(|(url, _)| *url).collect();
        testing::set_config("agents", &urls.join(", "));
        testing::set_secret("agent_token", TOKEN);
        let handler_fleet = fleet.clone();
        testing::set_http_handler(move |request| answer(&mut handler_fleet.borrow_mut(), request));
        fleet
    }

    fn workload(key: &str, state: &str, port: u16) -> Value {
        json!({"key": key, "command": "x", "port": 8080, "address": format!("10.0.0.9:{port}"),
               "pid": 42, "state": state, "restarts": 0, "healthy": null, "last_exit": null,
               "started_at": null, "adopted": false})
    }

    fn problem(status: u16, code: &str) -> Response {
        Response::json_body(
            status,
            &json!({"type": "about:blank", "title": "", "status": status, "code": code, "detail": code}),
        )
    }

    /// What an agent answers, like `bulkhead-agent` does.
    fn answer(fleet: &mut FakeFleet, request: &Request) -> Result<Response, HttpError> {
        let body = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        fleet
            .requests
            .push((request.method, request.url.clone(), body.clone()));
        let (base, path) = request
            .url
            .split_at(request.url.find("/v1/").expect("an API path"));
        let agent = fleet.agents.get_mut(base).expect("a configured agent");
        if agent.unreachable {
            return Err(HttpError::Transport(format!("{base}: connection refused")));
        }
        let token = agent.token.as_deref().unwrap_or(TOKEN);
        if request.header_value("authorization") != Some(&format!("Bearer {token}")) {
            return Ok(problem(401, "unauthorized"));
        }
        let used = agent.workloads.len() as u32;
        Ok(match (request.method, path) {
            (Method::Get, "/v1/capacity") => {
                let slots_free = agent
                    .reported_free
                    .unwrap_or(agent.slots.saturating_sub(used));
                let mut capacity = json!({"slots_total": agent.slots, "slots_used": used,
                                          "slots_free": slots_free});
                if !agent.before_sizes {
                    let ((cpu, memory), (cpu_free, memory_free)) = (agent.offered(), agent.free());
                    let more = json!({"cpu_millis_total": cpu, "cpu_millis_free": cpu_free,
                                      "cpu_millis_allocated": cpu - cpu_free,
                                      "memory_mib_total": memory, "memory_mib_free": memory_free,
                                      "memory_mib_allocated": memory - memory_free});
                    capacity
                        .as_object_mut()
                        .unwrap()
                        .extend(more.as_object().unwrap().clone());
                }
                Response::json_body(200, &capacity)
            }
            (Method::Get, "/v1/workloads") => Response::json_body(
                200,
                &json!({"items": agent.workloads.values().collect::<Vec<_>>()}),
            ),
            (Method::Get, path) if path.contains("/logs?") => {
                let key = path.strip_prefix("/v1/workloads/").unwrap();
                let (key, query) = key.split_once("/logs?").unwrap();
                if !agent.workloads.contains_key(key) {
                    return Ok(problem(404, "not_found"));
                }
                let after: u64 = query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("after="))
                    .map_or(0, |after| after.parse().unwrap());
                let lines: Vec<Value> = (after + 1..=3)
                    .map(|seq| {
                        let stream = ["system", "stdout", "stderr"][seq as usize - 1];
                        json!({"seq": seq, "time_ms": 1_000 + seq, "stream": stream,
                               "text": format!("line {seq}")})
                    })
                    .collect();
                Response::json_body(
                    200,
                    &json!({"key": key, "lines": lines, "next": 3, "gap": false}),
                )
            }
            (method, path) => {
                let key = path.strip_prefix("/v1/workloads/").unwrap().to_owned();
                match method {
                    Method::Get => match agent.workloads.get(&key) {
                        Some(found) => Response::json_body(200, found),
                        None => problem(404, "not_found"),
                    },
                    Method::Put => {
                        if agent.before_checks && body.get("health_check").is_some() {
                            return Ok(Response::json_body(
                                400,
                                &json!({"type": "about:blank", "title": "Bad Request", "status": 400, "code": "invalid_body",
                                        "detail": "Failed to deserialize the JSON body into the target type: unknown field `health_check`, expected one of `command`, `env`, `port` at line 1 column 90"}),
                            ));
                        }
                        if (agent.before_checks || agent.before_sizes) && body.get("size").is_some()
                        {
                            return Ok(Response::json_body(
                                400,
                                &json!({"type": "about:blank", "title": "Bad Request", "status": 400, "code": "invalid_body",
                                        "detail": "Failed to deserialize the JSON body into the target type: unknown field `size`, expected one of `command`, `env`, `port`, `health_check`, `source` at line 1 column 120"}),
                            ));
                        }
                        if let Some(found) = agent.workloads.get(&key) {
                            Response::json_body(200, found)
                        } else if used >= agent.slots {
                            problem(409, "capacity_exhausted")
                        } else {
                            let size = &body["size"];
                            let size = (
                                size["cpu_millis"].as_u64().unwrap_or(500) as u32,
                                size["memory_mib"].as_u64().unwrap_or(512) as u32,
                            );
                            let (cpu_free, memory_free) = agent.free();
                            if !agent.before_sizes && (size.0 > cpu_free || size.1 > memory_free) {
                                return Ok(problem(409, "capacity_exhausted"));
                            }
                            let made = workload(&key, "starting", 40000 + used as u16);
                            agent.workloads.insert(key.clone(), made.clone());
                            agent.sizes.insert(key, size);
                            Response::json_body(201, &made)
                        }
                    }
                    Method::Delete => {
                        agent.workloads.remove(&key);
                        agent.sizes.remove(&key);
                        Response::new(204, "")
                    }
                    _ => problem(405, "method_not_allowed"),
                }
            }
        })
    }

    fn spec(key: &str) -> InstanceSpec {
        InstanceSpec {
            instance_key: key.into(),
            region: "local".into(),
            artifact: "python3 -m http.server $PORT".into(),
            port: 8080,
            env: vec![("GREETING".into(), "hello".into())],
            labels: vec![],
            health_check: None,
            source: None,
            size: bulkhead_sdk::InstanceSize {
                cpu_millis: 250,
                memory_mib: 128,
            },
        }
    }

    /// A service's check of `/ready`, as the control plane passes it.
    fn ready_check() -> bulkhead_sdk::HealthCheck {
        bulkhead_sdk::HealthCheck {
            path: "/ready".into(),
            interval_ms: 500,
            timeout_ms: 200,
            healthy_threshold: 2,
            unhealthy_threshold: 3,
        }
    }

    fn puts(fleet: &Shared) -> Vec<(String, Value)> {
        fleet
            .borrow()
            .requests
            .iter()
            .filter(|(method, _, _)| *method == Method::Put)
            .map(|(_, url, body)| (url.clone(), body.clone()))
            .collect()
    }

    #[test]
    fn info_names_the_plugin_and_its_regions() {
        assert_eq!(Metal::info().name, "metal");
        assert_eq!(Metal::info().regions, ["local"]);
        testing::set_config("regions", "eu-1, us-1");
        assert_eq!(Metal::info().regions, ["eu-1", "us-1"]);
    }

    #[test]
    fn provision_places_on_the_agent_with_the_most_free_slots() {
        let fleet = fleet(&[
            ("http://a:7070", 1),
            ("http://b:7070/", 5),
            ("http://c:7070", 3),
        ]);
        let made = Metal::provision(spec("web-1")).unwrap();
        assert_eq!(made.provider_id, "http://b:7070#web-1");
        assert_eq!(made.instance_key, "web-1");
        assert_eq!(made.region, "local");
        assert_eq!(made.address.as_deref(), Some("10.0.0.9:40000"));
        assert!(matches!(made.state, InstanceState::Pending));
        assert_eq!(
            puts(&fleet),
            [(
                "http://b:7070/v1/workloads/web-1".to_owned(),
                json!({"command": "python3 -m http.server $PORT", "env": {"BULKHEAD_INSTANCE_KEY": "web-1", "GREETING": "hello"}, "port": 8080,
                       "size": {"cpu_millis": 250, "memory_mib": 128}})
            )]
        );
        assert!(
            testing::logs_take()
                .iter()
                .any(|(_, line)| line.contains("placed web-1 (250m CPU, 128 MiB) on http://b:7070"))
        );

        // b now has 4 free, c 3: the next goes to b too; once b is fuller, to c.
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://b:7070")
            .unwrap()
            .slots = 3;
        let made = Metal::provision(spec("web-2")).unwrap();
        assert_eq!(made.provider_id, "http://c:7070#web-2");
    }

    #[test]
    fn the_health_check_goes_to_the_agent_and_its_verdict_comes_back() {
        let fleet = fleet(&[("http://a:7070", 2)]);
        assert!(
            Metal::info()
                .capabilities
                .contains(&"health-checks".to_string())
        );
        let mut checked = spec("web-1");
        checked.health_check = Some(ready_check());
        let made = Metal::provision(checked).unwrap();
        assert!(
            matches!(made.health, WorkloadHealth::Unchecked),
            "the fake agent shows none"
        );
        assert_eq!(
            puts(&fleet)[0].1["health_check"],
            json!({"path": "/ready", "interval_ms": 500, "timeout_ms": 200, "healthy_threshold": 2, "unhealthy_threshold": 3})
        );
        Metal::provision(spec("web-2")).unwrap();
        assert!(
            puts(&fleet)[1].1.get("health_check").is_none(),
            "none given, none sent"
        );

        for (shown, reported) in [
            ("pending", WorkloadHealth::Pending),
            ("healthy", WorkloadHealth::Healthy),
            ("unhealthy", WorkloadHealth::Unhealthy),
        ] {
            fleet
                .borrow_mut()
                .agents
                .get_mut("http://a:7070")
                .unwrap()
                .workloads
                .get_mut("web-1")
                .unwrap()["health"] = json!(shown);
            let listed = Metal::list().unwrap();
            let health = |key: &str| {
                listed
                    .iter()
                    .find(|i| i.instance_key == key)
                    .unwrap()
                    .health
            };
            assert_eq!(health("web-1"), reported);
            assert_eq!(health("web-2"), WorkloadHealth::Unchecked);
            assert_eq!(Metal::describe("web-1".into()).unwrap().health, reported);
        }
    }

    #[test]
    fn an_agent_older_than_health_checks_takes_the_workload_without_one() {
        let fleet = fleet(&[("http://old:7070", 2)]);
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://old:7070")
            .unwrap()
            .before_checks = true;
        let mut checked = spec("web-3");
        checked.health_check = Some(ready_check());
        let made = Metal::provision(checked).unwrap();
        assert_eq!(made.provider_id, "http://old:7070#web-3");
        assert!(matches!(made.health, WorkloadHealth::Unchecked));
        let sent = puts(&fleet);
        // Without the check, then without the size, which it does not know either.
        assert_eq!(sent.len(), 3, "{sent:?}");
        assert!(sent[0].1.get("health_check").is_some());
        assert!(sent[1].1.get("health_check").is_none() && sent[1].1.get("size").is_some());
        assert!(sent[2].1.get("health_check").is_none() && sent[2].1.get("size").is_none());
        let logs = testing::logs_take();
        assert!(
            logs.iter()
                .any(|(_, line)| line.contains("does not make health checks"))
        );
        assert!(
            logs.iter()
                .any(|(_, line)| line.contains("does not hold workloads to their sizes"))
        );
    }

    #[test]
    fn the_size_goes_to_the_agent_and_an_agent_older_than_sizes_runs_the_workload_unheld() {
        let fleet = fleet(&[("http://old:7070", 2)]);
        let made = Metal::provision(spec("web-4")).unwrap();
        assert_eq!(made.machine_type, None, "an agent has no machine types");
        let sent = puts(&fleet);
        assert_eq!(
            sent[0].1["size"],
            json!({"cpu_millis": 250, "memory_mib": 128})
        );

        fleet
            .borrow_mut()
            .agents
            .get_mut("http://old:7070")
            .unwrap()
            .before_sizes = true;
        fleet.borrow_mut().requests.clear();
        let made = Metal::provision(spec("web-5")).unwrap();
        assert_eq!(made.provider_id, "http://old:7070#web-5");
        let sent = puts(&fleet);
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert!(sent[1].1.get("size").is_none());
        assert!(
            testing::logs_take()
                .iter()
                .any(|(_, line)| line.contains("does not hold workloads to their sizes"))
        );
    }

    #[test]
    fn logs_come_from_the_agent_that_runs_the_instance_remembered_for_the_next_page() {
        let fleet = fleet(&[("http://a:7070", 2), ("http://b:7070", 2)]);
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://b:7070")
            .unwrap()
            .workloads
            .insert("web-1".into(), workload("web-1", "running", 40000));
        assert!(Metal::info().capabilities.contains(&"logs".to_owned()));

        let page = Metal::logs("web-1".into(), LogRequest::new(None, 100)).unwrap();
        let streams: Vec<_> = page.lines.iter().map(|line| line.stream).collect();
        use bulkhead_sdk::LogStream::*;
        assert_eq!(streams, [System, Stdout, Stderr]);
        assert_eq!(page.lines[2].text, "line 3");
        assert_eq!(page.lines[0].time_ms, 1_001);
        assert_eq!(page.next, "3");
        let asked: Vec<String> = fleet.borrow_mut().requests.drain(..).map(|r| r.1).collect();
        assert!(
            asked[0].starts_with("http://a:7070/v1/workloads/web-1/logs?"),
            "{asked:?}"
        );
        assert!(
            asked[1].starts_with("http://b:7070/v1/workloads/web-1/logs?"),
            "{asked:?}"
        );

        // The next page asks the agent that answered, from the cursor.
        let page = Metal::logs("web-1".into(), LogRequest::new(Some("1".into()), 100)).unwrap();
        assert_eq!(page.lines.len(), 2);
        let asked: Vec<String> = fleet.borrow_mut().requests.drain(..).map(|r| r.1).collect();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(asked[0].starts_with("http://b:7070/") && asked[0].ends_with("&after=1"));

        assert!(matches!(
            Metal::logs("web-1".into(), LogRequest::new(Some("x".into()), 10)),
            Err(ProviderError::InvalidSpec(_))
        ));
        assert!(matches!(
            Metal::logs("web-9".into(), LogRequest::new(None, 10)),
            Err(ProviderError::NotFound(_))
        ));
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://a:7070")
            .unwrap()
            .unreachable = true;
        assert!(matches!(
            Metal::logs("web-9".into(), LogRequest::new(None, 10)),
            Err(ProviderError::Unavailable(_))
        ));
        testing::cache_clear();
    }

    #[test]
    fn provision_is_idempotent_and_finds_the_existing_workload() {
        let fleet = fleet(&[("http://a:7070", 9), ("http://c:7070", 1)]);
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://c:7070")
            .unwrap()
            .workloads
            .insert("web-1".into(), workload("web-1", "running", 41000));
        let found = Metal::provision(spec("web-1")).unwrap();
        assert_eq!(found.provider_id, "http://c:7070#web-1");
        assert!(matches!(found.state, InstanceState::Running));
        assert_eq!(found.address.as_deref(), Some("10.0.0.9:41000"));
        assert!(puts(&fleet).is_empty(), "nothing started");

        let described = Metal::describe("web-1".into()).unwrap();
        assert_eq!(described.provider_id, "http://c:7070#web-1");
        let listed = Metal::list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].instance_key, "web-1");

        Metal::deprovision("web-1".into()).unwrap();
        Metal::deprovision("web-1".into()).unwrap();
        assert!(matches!(
            Metal::describe("web-1".into()),
            Err(ProviderError::NotFound(_))
        ));
        assert!(Metal::list().unwrap().is_empty());
    }

    #[test]
    fn workload_states_map_to_instance_states() {
        let state = |name: &str| state_of(&serde_json::from_value(workload("k", name, 1)).unwrap());
        assert!(matches!(state("running"), InstanceState::Running));
        assert!(matches!(state("starting"), InstanceState::Pending));
        assert!(matches!(state("restarting"), InstanceState::Pending));
        assert!(matches!(state("stopped"), InstanceState::Stopped));
        assert!(matches!(state("failed"), InstanceState::Failed));
    }

    #[test]
    fn a_refused_token_is_unauthorized() {
        let fleet = fleet(&[("http://a:7070", 4), ("http://b:7070", 4)]);
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://b:7070")
            .unwrap()
            .token = Some("other".into());
        for result in [
            Metal::provision(spec("web-1")).map(drop),
            Metal::describe("web-1".into()).map(drop),
            Metal::deprovision("web-1".into()),
            Metal::list().map(drop),
            Metal::health().map(drop),
        ] {
            assert!(
                matches!(&result, Err(ProviderError::Unauthorized(m)) if m.contains("http://b:7070")),
                "{result:?}"
            );
        }
        testing::set_secret("agent_token", "");
        assert!(matches!(
            Metal::provision(spec("web-1")),
            Err(ProviderError::Unauthorized(m)) if m.contains("agent_token")
        ));
    }

    #[test]
    fn every_agent_full_is_quota_exceeded() {
        let fleet = fleet(&[("http://a:7070", 1), ("http://b:7070", 1)]);
        Metal::provision(spec("one")).unwrap();
        Metal::provision(spec("two")).unwrap();
        assert!(matches!(
            Metal::provision(spec("three")),
            Err(ProviderError::QuotaExceeded(m))
                if m == "none of the 2 reachable agents has 250m CPU and 128 MiB free \
                         (the most free on one: 750m CPU and 896 MiB)"
        ));
        // The capacity seen and the agent's answer can differ (a race): a 409 moves on.
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://a:7070")
            .unwrap()
            .reported_free = Some(3);
        assert!(matches!(
            Metal::provision(spec("three")),
            Err(ProviderError::QuotaExceeded(_))
        ));
        assert_eq!(
            puts(&fleet).last().unwrap().0,
            "http://a:7070/v1/workloads/three"
        );
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://b:7070")
            .unwrap()
            .slots = 2;
        let made = Metal::provision(spec("three")).unwrap();
        assert_eq!(made.provider_id, "http://b:7070#three", "after a's 409, b");
    }

    #[test]
    fn an_instance_goes_where_its_size_fits_and_waits_when_none_has_room() {
        let fleet = fleet(&[("http://a:7070", 4), ("http://b:7070", 4)]);
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://a:7070")
            .unwrap()
            .room = Some((1000, 1024));
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://b:7070")
            .unwrap()
            .room = Some((4000, 2048));
        let sized = |key: &str, cpu_millis: u32, memory_mib: u32| InstanceSpec {
            size: bulkhead_sdk::InstanceSize {
                cpu_millis,
                memory_mib,
            },
            ..spec(key)
        };
        // Only b holds 2000m; twice.
        for key in ["big-1", "big-2"] {
            let made = Metal::provision(sized(key, 2000, 512)).unwrap();
            assert_eq!(made.provider_id, format!("http://b:7070#{key}"));
        }
        // b is full by CPU with slots left: a third waits, and the error says for what.
        assert!(matches!(
            Metal::provision(sized("big-3", 2000, 512)),
            Err(ProviderError::QuotaExceeded(m))
                if m == "none of the 2 reachable agents has 2000m CPU and 512 MiB free \
                         (the most free on one: 1000m CPU and 1024 MiB)"
        ));
        // More than any agent offers: said so (and never who the agents are).
        match Metal::provision(sized("huge", 8000, 512)) {
            Err(ProviderError::QuotaExceeded(m)) => {
                assert!(
                    m.starts_with("8000m CPU and 512 MiB is more than any of the 2"),
                    "{m}"
                );
                assert!(!m.contains("http"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            !puts(&fleet)
                .iter()
                .any(|(url, _)| url.ends_with("/big-3") || url.ends_with("/huge")),
            "no agent was asked to overcommit"
        );
        // A small one goes where the most CPU is free: a.
        let made = Metal::provision(sized("small", 500, 256)).unwrap();
        assert_eq!(made.provider_id, "http://a:7070#small");
        // Room freed on b: the waiting one is taken.
        Metal::deprovision("big-1".into()).unwrap();
        let made = Metal::provision(sized("big-3", 2000, 512)).unwrap();
        assert_eq!(made.provider_id, "http://b:7070#big-3");
        // The health report sums what is free.
        let report = Metal::health().unwrap();
        assert!(
            report
                .message
                .contains("5 of 8 slots, 500m CPU and 1792 MiB free"),
            "{}",
            report.message
        );
    }

    #[test]
    fn unreachable_agents_are_skipped_or_unavailable() {
        let fleet = fleet(&[("http://a:7070", 4), ("http://b:7070", 8)]);
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://b:7070")
            .unwrap()
            .unreachable = true;

        let report = Metal::health().unwrap();
        assert!(matches!(report.status, HealthStatus::Degraded));
        assert!(
            report.message.contains("1 of 2 agents answer"),
            "{}",
            report.message
        );

        // Placement goes on without the unreachable agent, saying so.
        let made = Metal::provision(spec("web-1")).unwrap();
        assert_eq!(made.provider_id, "http://a:7070#web-1");
        assert!(
            testing::logs_take()
                .iter()
                .any(|(_, line)| line.contains("without asking every agent"))
        );
        assert_eq!(Metal::list().unwrap().len(), 1);
        // Not found on the agents that answered is not final while one did not.
        assert!(matches!(
            Metal::describe("web-2".into()),
            Err(ProviderError::Unavailable(m)) if m.contains("connection refused")
        ));
        // Nor is a deletion (a deletes it; b may still have it).
        assert!(matches!(
            Metal::deprovision("web-1".into()),
            Err(ProviderError::Unavailable(_))
        ));

        fleet
            .borrow_mut()
            .agents
            .get_mut("http://a:7070")
            .unwrap()
            .unreachable = true;
        for result in [
            Metal::provision(spec("web-3")).map(drop),
            Metal::list().map(drop),
            Metal::health().map(drop),
        ] {
            assert!(
                matches!(result, Err(ProviderError::Unavailable(_))),
                "{result:?}"
            );
        }

        fleet
            .borrow_mut()
            .agents
            .get_mut("http://a:7070")
            .unwrap()
            .unreachable = false;
        fleet
            .borrow_mut()
            .agents
            .get_mut("http://b:7070")
            .unwrap()
            .unreachable = false;
        let report = Metal::health().unwrap();
        assert!(matches!(report.status, HealthStatus::Healthy));
        assert_eq!(
            report.message,
            "2 of 2 agents answer; 12 of 12 slots, 12000m CPU and 12288 MiB free"
        );
    }

    #[test]
    fn bad_specs_and_configuration_are_refused() {
        let _fleet = fleet(&[("http://a:7070", 4)]);
        let mut bad_region = spec("web-1");
        bad_region.region = "mars".into();
        assert!(matches!(
            Metal::provision(bad_region),
            Err(ProviderError::InvalidSpec(_))
        ));
        assert!(matches!(
            Metal::provision(spec("Web_1")),
            Err(ProviderError::InvalidSpec(_))
        ));
        assert!(matches!(
            Metal::describe("../x".into()),
            Err(ProviderError::NotFound(_))
        ));
        testing::set_config("agents", " , ");
        assert!(matches!(
            Metal::health(),
            Err(ProviderError::InvalidSpec(m)) if m.contains("no agents configured")
        ));
    }
}
