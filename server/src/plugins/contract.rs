//! The published versions of the `bulkhead:provider` contract the host loads, side by side:
//! bindings of each (from `sdk/wit/`, where each published version is kept as published), and
//! the adaptation of older versions to the newest, which the rest of the host speaks.
//!
//! A plugin built for 0.2.0 to 0.6.0 keeps working unchanged: its answers are converted to
//! 0.7.0 types (it is given no size and says no machine type; before 0.6.0 it builds no code
//! from repositories, and its instances give no `detail`; before 0.5.0 it has no logs; before
//! 0.4.0 its instances' health is `unchecked`, so the host checks them itself; a 0.2.0 plugin
//! declares no configuration, and its errors are a subset of the newer ones), its imports are
//! served by the same host functions. A spec with a `source` is refused for a plugin older than
//! 0.6.0 (`invalid-spec`) without instantiating it: given the spec less its source, it would
//! run the command without the code. Adding a
//! version: a new module here, a variant of [`AdapterPre`], `adapt_shared!` and the
//! conversions that differ for the version it replaces as the newest.

use wasmtime::Store;

use super::PluginState;

/// The newest contract: what the host speaks internally.
pub mod v0_7 {
    wasmtime::component::bindgen!({
        path: "../sdk/wit",
        world: "provider",
        exports: { default: async },
        // For `bulkhead plugin call --output json`.
        additional_derives: [serde::Serialize],
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// Contract 0.6.0, as published (`sdk/wit/0.6.0/`).
pub mod v0_6 {
    wasmtime::component::bindgen!({
        path: "../sdk/wit/0.6.0",
        world: "provider",
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// Contract 0.5.0, as published (`sdk/wit/0.5.0/`).
pub mod v0_5 {
    wasmtime::component::bindgen!({
        path: "../sdk/wit/0.5.0",
        world: "provider",
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// Contract 0.4.0, as published (`sdk/wit/0.4.0/`).
pub mod v0_4 {
    wasmtime::component::bindgen!({
        path: "../sdk/wit/0.4.0",
        world: "provider",
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// Contract 0.3.0, as published (`sdk/wit/0.3.0/`).
pub mod v0_3 {
    wasmtime::component::bindgen!({
        path: "../sdk/wit/0.3.0",
        world: "provider",
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// Contract 0.2.0, as published (`sdk/wit/0.2.0/`).
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../sdk/wit/0.2.0",
        world: "provider",
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

use v0_7::bulkhead::provider::types as newest;

/// Versions of the contract this host can load, oldest first.
pub const SUPPORTED_CONTRACT_VERSIONS: &[&str] =
    &["0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0"];

/// A component pre-instantiated for the contract version it was built for.
pub enum AdapterPre {
    V0_7(v0_7::ProviderPre<PluginState>),
    V0_6(v0_6::ProviderPre<PluginState>),
    V0_5(v0_5::ProviderPre<PluginState>),
    V0_4(v0_4::ProviderPre<PluginState>),
    V0_3(v0_3::ProviderPre<PluginState>),
    V0_2(v0_2::ProviderPre<PluginState>),
}

/// One call of the adapter, in the newest contract's terms.
pub enum Call {
    Info,
    Health,
    Provision(newest::InstanceSpec),
    Deprovision(String),
    Describe(String),
    List,
    Logs(String, newest::LogRequest),
}

impl Call {
    /// The call's name in the contract.
    pub const fn name(&self) -> &'static str {
        match self {
            Call::Info => "info",
            Call::Health => "health",
            Call::Provision(_) => "provision",
            Call::Deprovision(_) => "deprovision",
            Call::Describe(_) => "describe",
            Call::List => "list",
            Call::Logs(..) => "logs",
        }
    }
}

/// The answer of a [`Call`], in the newest contract's terms.
pub enum Answer {
    Info(newest::ProviderInfo),
    Health(newest::HealthReport),
    Instance(newest::Instance),
    Done,
    Instances(Vec<newest::Instance>),
    Logs(newest::LogPage),
}

type Outcome = wasmtime::Result<Result<Answer, newest::ProviderError>>;

/// The calls of an older version's adapter, its answers converted (`Into`) to the newest
/// contract's. With `logs`, `$version` has logs, otherwise none; with `sources`, it builds code
/// from a repository, otherwise a spec with a source is refused.
macro_rules! call_adapted {
    ($pre:expr, $store:expr, $call:expr, $version:literal) => {{
        if let Call::Logs(..) = $call {
            return Ok(Err(newest::ProviderError::InvalidSpec(format!(
                "a plugin of contract {} has no logs",
                $version
            ))));
        }
        call_adapted!(@calls adapter, store; $pre, $store, $call, $version, false;
            Call::Logs(..) => unreachable!("answered above"))
    }};
    ($pre:expr, $store:expr, $call:expr, $version:literal, logs) => {
        call_adapted!(@logs $pre, $store, $call, $version, false)
    };
    ($pre:expr, $store:expr, $call:expr, $version:literal, logs, sources) => {
        call_adapted!(@logs $pre, $store, $call, $version, true)
    };
    (@logs $pre:expr, $store:expr, $call:expr, $version:literal, $sources:literal) => {
        call_adapted!(@calls adapter, store; $pre, $store, $call, $version, $sources;
            Call::Logs(key, request) => adapter
                .call_logs(&mut *store, &key, &request.into())
                .await?
                .map(|page| Answer::Logs(page.into())))
    };
    // `$adapter` and `$st` are named by the caller, so that its `Call::Logs` arm can use them.
    (@calls $adapter:ident, $st:ident; $pre:expr, $store:expr, $call:expr, $version:literal,
        $sources:literal; $($logs:tt)*) => {{
        let $st = $store;
        if let Call::Provision(spec) = &$call
            && spec.source.is_some()
            && !$sources
        {
            return Ok(Err(newest::ProviderError::InvalidSpec(format!(
                "a plugin of contract {} cannot build code from a repository",
                $version
            ))));
        }
        let instance = $pre.instantiate_async(&mut *$st).await?;
        let $adapter = instance.bulkhead_provider_adapter();
        let result = match $call {
            Call::Info => Ok(Answer::Info($adapter.call_info(&mut *$st).await?.into())),
            Call::Health => $adapter
                .call_health(&mut *$st)
                .await?
                .map(|report| Answer::Health(report.into())),
            Call::Provision(spec) => $adapter
                .call_provision(&mut *$st, &spec.into())
                .await?
                .map(|made| Answer::Instance(made.into())),
            Call::Deprovision(key) => $adapter
                .call_deprovision(&mut *$st, &key)
                .await?
                .map(|()| Answer::Done),
            Call::Describe(key) => $adapter
                .call_describe(&mut *$st, &key)
                .await?
                .map(|found| Answer::Instance(found.into())),
            Call::List => $adapter
                .call_list(&mut *$st)
                .await?
                .map(|all| Answer::Instances(all.into_iter().map(Into::into).collect())),
            $($logs)*
        };
        Ok(result.map_err(Into::into))
    }};
}

impl AdapterPre {
    /// Instantiates the component in `store` and makes `call`, adapting an older version's
    /// answer to the newest contract.
    pub async fn call(&self, store: &mut Store<PluginState>, call: Call) -> Outcome {
        match self {
            AdapterPre::V0_7(pre) => {
                let instance = pre.instantiate_async(&mut *store).await?;
                let adapter = instance.bulkhead_provider_adapter();
                Ok(match call {
                    Call::Info => Ok(Answer::Info(adapter.call_info(store).await?)),
                    Call::Health => adapter.call_health(store).await?.map(Answer::Health),
                    Call::Provision(spec) => adapter
                        .call_provision(store, &spec)
                        .await?
                        .map(Answer::Instance),
                    Call::Deprovision(key) => adapter
                        .call_deprovision(store, &key)
                        .await?
                        .map(|()| Answer::Done),
                    Call::Describe(key) => adapter
                        .call_describe(store, &key)
                        .await?
                        .map(Answer::Instance),
                    Call::List => adapter.call_list(store).await?.map(Answer::Instances),
                    Call::Logs(key, request) => adapter
                        .call_logs(store, &key, &request)
                        .await?
                        .map(Answer::Logs),
                })
            }
            AdapterPre::V0_6(pre) => call_adapted!(pre, store, call, "0.6.0", logs, sources),
            AdapterPre::V0_5(pre) => call_adapted!(pre, store, call, "0.5.0", logs),
            AdapterPre::V0_4(pre) => call_adapted!(pre, store, call, "0.4.0"),
            AdapterPre::V0_3(pre) => call_adapted!(pre, store, call, "0.3.0"),
            AdapterPre::V0_2(pre) => call_adapted!(pre, store, call, "0.2.0"),
        }
    }
}

/// The records and enums that every older version shares with the newest contract, converted
/// to it: `$old` is the older version's module.
macro_rules! adapt_shared {
    ($old:ident) => {
        impl From<$old::bulkhead::provider::host::LogLevel> for NewLevel {
            fn from(level: $old::bulkhead::provider::host::LogLevel) -> Self {
                use $old::bulkhead::provider::host::LogLevel as Old;
                match level {
                    Old::Trace => NewLevel::Trace,
                    Old::Debug => NewLevel::Debug,
                    Old::Info => NewLevel::Info,
                    Old::Warn => NewLevel::Warn,
                    Old::Error => NewLevel::Error,
                }
            }
        }

        impl From<$old::bulkhead::provider::types::HealthStatus> for newest::HealthStatus {
            fn from(status: $old::bulkhead::provider::types::HealthStatus) -> Self {
                use $old::bulkhead::provider::types::HealthStatus as Old;
                match status {
                    Old::Healthy => newest::HealthStatus::Healthy,
                    Old::Degraded => newest::HealthStatus::Degraded,
                    Old::Unavailable => newest::HealthStatus::Unavailable,
                }
            }
        }

        impl From<$old::bulkhead::provider::types::HealthReport> for newest::HealthReport {
            fn from(report: $old::bulkhead::provider::types::HealthReport) -> Self {
                Self {
                    status: report.status.into(),
                    message: report.message,
                }
            }
        }

        impl From<$old::bulkhead::provider::types::InstanceState> for newest::InstanceState {
            fn from(state: $old::bulkhead::provider::types::InstanceState) -> Self {
                use $old::bulkhead::provider::types::InstanceState as Old;
                match state {
                    Old::Pending => newest::InstanceState::Pending,
                    Old::Running => newest::InstanceState::Running,
                    Old::Stopping => newest::InstanceState::Stopping,
                    Old::Stopped => newest::InstanceState::Stopped,
                    Old::Failed => newest::InstanceState::Failed,
                }
            }
        }
    };
}

/// The records that 0.2.0 and 0.3.0 (before health checks) share with the newest contract,
/// converted to it: `$old` is the older version's module.
macro_rules! adapt_before_health_checks {
    ($old:ident) => {
        /// The spec less the health check: plugins of this version cannot check workloads.
        impl From<newest::InstanceSpec> for $old::bulkhead::provider::types::InstanceSpec {
            fn from(spec: newest::InstanceSpec) -> Self {
                Self {
                    instance_key: spec.instance_key,
                    region: spec.region,
                    artifact: spec.artifact,
                    port: spec.port,
                    env: spec.env,
                    labels: spec.labels,
                }
            }
        }

        impl From<$old::bulkhead::provider::types::Instance> for newest::Instance {
            fn from(instance: $old::bulkhead::provider::types::Instance) -> Self {
                Self {
                    instance_key: instance.instance_key,
                    provider_id: instance.provider_id,
                    region: instance.region,
                    state: instance.state.into(),
                    address: instance.address,
                    health: newest::WorkloadHealth::Unchecked,
                    detail: None,
                    machine_type: None,
                }
            }
        }
    };
}

use v0_7::bulkhead::provider::host::LogLevel as NewLevel;
adapt_shared!(v0_6);
adapt_shared!(v0_5);
adapt_shared!(v0_4);
adapt_shared!(v0_3);
adapt_shared!(v0_2);
adapt_before_health_checks!(v0_3);
adapt_before_health_checks!(v0_2);

/// The errors and the information that 0.3.0 and 0.4.0 share with the newest contract.
macro_rules! adapt_info_and_errors {
    ($old:ident) => {
        impl From<$old::bulkhead::provider::types::ProviderInfo> for newest::ProviderInfo {
            fn from(info: $old::bulkhead::provider::types::ProviderInfo) -> Self {
                Self {
                    name: info.name,
                    version: info.version,
                    regions: info.regions,
                    capabilities: info.capabilities,
                    config: info
                        .config
                        .into_iter()
                        .map(|key| newest::ConfigKey {
                            name: key.name,
                            required: key.required,
                            secret: key.secret,
                            description: key.description,
                        })
                        .collect(),
                }
            }
        }

        impl From<$old::bulkhead::provider::types::ProviderError> for newest::ProviderError {
            fn from(error: $old::bulkhead::provider::types::ProviderError) -> Self {
                use newest::ProviderError as New;
                use $old::bulkhead::provider::types::ProviderError as Old;
                match error {
                    Old::Unauthorized(m) => New::Unauthorized(m),
                    Old::Forbidden(m) => New::Forbidden(m),
                    Old::Misconfigured(m) => New::Misconfigured(m),
                    Old::AccountSuspended(m) => New::AccountSuspended(m),
                    Old::RateLimited(limit) => New::RateLimited(newest::RateLimit {
                        retry_after_secs: limit.retry_after_secs,
                        message: limit.message,
                    }),
                    Old::QuotaExceeded(m) => New::QuotaExceeded(m),
                    Old::NotFound(m) => New::NotFound(m),
                    Old::InvalidSpec(m) => New::InvalidSpec(m),
                    Old::Unavailable(m) => New::Unavailable(m),
                    Old::Internal(m) => New::Internal(m),
                }
            }
        }
    };
}

adapt_info_and_errors!(v0_6);
adapt_info_and_errors!(v0_5);
adapt_info_and_errors!(v0_4);
adapt_info_and_errors!(v0_3);

/// The health check and the workload's health that 0.4.0 to 0.6.0 share with the newest
/// contract.
macro_rules! adapt_workload_health {
    ($old:ident) => {
        impl From<newest::HealthCheck> for $old::bulkhead::provider::types::HealthCheck {
            fn from(check: newest::HealthCheck) -> Self {
                Self {
                    path: check.path,
                    interval_ms: check.interval_ms,
                    timeout_ms: check.timeout_ms,
                    healthy_threshold: check.healthy_threshold,
                    unhealthy_threshold: check.unhealthy_threshold,
                }
            }
        }

        impl From<$old::bulkhead::provider::types::WorkloadHealth> for newest::WorkloadHealth {
            fn from(health: $old::bulkhead::provider::types::WorkloadHealth) -> Self {
                use $old::bulkhead::provider::types::WorkloadHealth as Old;
                match health {
                    Old::Unchecked => newest::WorkloadHealth::Unchecked,
                    Old::Pending => newest::WorkloadHealth::Pending,
                    Old::Healthy => newest::WorkloadHealth::Healthy,
                    Old::Unhealthy => newest::WorkloadHealth::Unhealthy,
                }
            }
        }
    };
}

adapt_workload_health!(v0_6);
adapt_workload_health!(v0_5);
adapt_workload_health!(v0_4);

/// The spec less its source (refused before the call when it has one: see `call_adapted!`)
/// and the health check of 0.4.0 and 0.5.0; their instances without a `detail`.
macro_rules! adapt_health_checks {
    ($old:ident) => {
        impl From<newest::InstanceSpec> for $old::bulkhead::provider::types::InstanceSpec {
            fn from(spec: newest::InstanceSpec) -> Self {
                Self {
                    instance_key: spec.instance_key,
                    region: spec.region,
                    artifact: spec.artifact,
                    port: spec.port,
                    env: spec.env,
                    labels: spec.labels,
                    health_check: spec.health_check.map(Into::into),
                }
            }
        }

        impl From<$old::bulkhead::provider::types::Instance> for newest::Instance {
            fn from(instance: $old::bulkhead::provider::types::Instance) -> Self {
                Self {
                    instance_key: instance.instance_key,
                    provider_id: instance.provider_id,
                    region: instance.region,
                    state: instance.state.into(),
                    address: instance.address,
                    health: instance.health.into(),
                    detail: None,
                    machine_type: None,
                }
            }
        }
    };
}

adapt_health_checks!(v0_5);
adapt_health_checks!(v0_4);

/// The logs that 0.5.0 and 0.6.0 share with the newest contract.
macro_rules! adapt_logs {
    ($old:ident) => {
        impl From<newest::LogRequest> for $old::bulkhead::provider::types::LogRequest {
            fn from(request: newest::LogRequest) -> Self {
                Self {
                    after: request.after,
                    since_ms: request.since_ms,
                    max_lines: request.max_lines,
                    max_bytes: request.max_bytes,
                }
            }
        }

        impl From<$old::bulkhead::provider::types::LogPage> for newest::LogPage {
            fn from(page: $old::bulkhead::provider::types::LogPage) -> Self {
                use $old::bulkhead::provider::types as old;
                Self {
                    lines: page
                        .lines
                        .into_iter()
                        .map(|line| newest::LogLine {
                            time_ms: line.time_ms,
                            stream: match line.stream {
                                old::LogStream::Stdout => newest::LogStream::Stdout,
                                old::LogStream::Stderr => newest::LogStream::Stderr,
                                old::LogStream::System => newest::LogStream::System,
                            },
                            text: line.text,
                        })
                        .collect(),
                    next: page.next,
                    gap: page.gap,
                }
            }
        }
    };
}

adapt_logs!(v0_6);
adapt_logs!(v0_5);

/// 0.6.0 → 0.7.0: the spec less its size; instances without a machine type.
mod adapt_0_6 {
    use super::newest;
    use super::v0_6::bulkhead::provider::types as old;

    impl From<newest::InstanceSpec> for old::InstanceSpec {
        fn from(spec: newest::InstanceSpec) -> Self {
            Self {
                instance_key: spec.instance_key,
                region: spec.region,
                artifact: spec.artifact,
                port: spec.port,
                env: spec.env,
                labels: spec.labels,
                health_check: spec.health_check.map(Into::into),
                source: spec.source.map(|source| old::GitSource {
                    url: source.url,
                    commit: source.commit,
                    token: source.token,
                    build: source.build,
                }),
            }
        }
    }

    impl From<old::Instance> for newest::Instance {
        fn from(instance: old::Instance) -> Self {
            Self {
                instance_key: instance.instance_key,
                provider_id: instance.provider_id,
                region: instance.region,
                state: instance.state.into(),
                address: instance.address,
                health: instance.health.into(),
                detail: instance.detail,
                machine_type: None,
            }
        }
    }
}

/// 0.2.0 → 0.7.0: the same records, less what 0.3.0 and later added.
mod adapt_0_2 {
    use super::newest;
    use super::v0_2::bulkhead::provider::types as old;

    impl From<old::ProviderInfo> for newest::ProviderInfo {
        fn from(info: old::ProviderInfo) -> Self {
            Self {
                name: info.name,
                version: info.version,
                regions: info.regions,
                capabilities: info.capabilities,
                // 0.2.0 plugins declare nothing: the host checks nothing for them.
                config: Vec::new(),
            }
        }
    }

    impl From<old::ProviderError> for newest::ProviderError {
        fn from(error: old::ProviderError) -> Self {
            use newest::ProviderError as New;
            match error {
                old::ProviderError::Unauthorized(m) => New::Unauthorized(m),
                old::ProviderError::AccountSuspended(m) => New::AccountSuspended(m),
                old::ProviderError::RateLimited(limit) => New::RateLimited(newest::RateLimit {
                    retry_after_secs: limit.retry_after_secs,
                    message: limit.message,
                }),
                old::ProviderError::QuotaExceeded(m) => New::QuotaExceeded(m),
                old::ProviderError::NotFound(m) => New::NotFound(m),
                old::ProviderError::InvalidSpec(m) => New::InvalidSpec(m),
                old::ProviderError::Unavailable(m) => New::Unavailable(m),
                old::ProviderError::Internal(m) => New::Internal(m),
            }
        }
    }
}
