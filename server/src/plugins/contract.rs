//! The published versions of the `bulkhead:provider` contract the host loads, side by side:
//! bindings of each (from `sdk/wit/`, where each published version is kept as published), and
//! the adaptation of older versions to the newest, which the rest of the host speaks.
//!
//! A plugin built for 0.2.0 keeps working unchanged: its answers are converted to 0.3.0 types
//! (it declares no configuration, and its errors are a subset of 0.3.0's), its imports are
//! served by the same host functions. Adding a version: a new module here, a variant of
//! [`AdapterPre`], and conversions from the previous newest.

use wasmtime::Store;

use super::PluginState;

/// The newest contract: what the host speaks internally.
pub mod v0_3 {
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

use v0_3::bulkhead::provider::types as newest;

/// Versions of the contract this host can load, oldest first.
pub const SUPPORTED_CONTRACT_VERSIONS: &[&str] = &["0.2.0", "0.3.0"];

/// A component pre-instantiated for the contract version it was built for.
pub enum AdapterPre {
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
}

/// The answer of a [`Call`], in the newest contract's terms.
pub enum Answer {
    Info(newest::ProviderInfo),
    Health(newest::HealthReport),
    Instance(newest::Instance),
    Done,
    Instances(Vec<newest::Instance>),
}

type Outcome = wasmtime::Result<Result<Answer, newest::ProviderError>>;

impl AdapterPre {
    /// Instantiates the component in `store` and makes `call`, adapting an older version's
    /// answer to the newest contract.
    pub async fn call(&self, store: &mut Store<PluginState>, call: Call) -> Outcome {
        match self {
            AdapterPre::V0_3(pre) => {
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
                })
            }
            AdapterPre::V0_2(pre) => {
                let instance = pre.instantiate_async(&mut *store).await?;
                let adapter = instance.bulkhead_provider_adapter();
                let instance =
                    |i: v0_2::bulkhead::provider::types::Instance| -> newest::Instance { i.into() };
                let result = match call {
                    Call::Info => Ok(Answer::Info(adapter.call_info(store).await?.into())),
                    Call::Health => adapter
                        .call_health(store)
                        .await?
                        .map(|report| Answer::Health(report.into())),
                    Call::Provision(spec) => adapter
                        .call_provision(store, &spec.into())
                        .await?
                        .map(|made| Answer::Instance(instance(made))),
                    Call::Deprovision(key) => adapter
                        .call_deprovision(store, &key)
                        .await?
                        .map(|()| Answer::Done),
                    Call::Describe(key) => adapter
                        .call_describe(store, &key)
                        .await?
                        .map(|found| Answer::Instance(instance(found))),
                    Call::List => adapter
                        .call_list(store)
                        .await?
                        .map(|all| Answer::Instances(all.into_iter().map(instance).collect())),
                };
                Ok(result.map_err(Into::into))
            }
        }
    }
}

/// 0.2.0 → 0.3.0: the same records, less what 0.3.0 added.
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

    impl From<old::HealthReport> for newest::HealthReport {
        fn from(report: old::HealthReport) -> Self {
            Self {
                status: match report.status {
                    old::HealthStatus::Healthy => newest::HealthStatus::Healthy,
                    old::HealthStatus::Degraded => newest::HealthStatus::Degraded,
                    old::HealthStatus::Unavailable => newest::HealthStatus::Unavailable,
                },
                message: report.message,
            }
        }
    }

    impl From<newest::InstanceSpec> for old::InstanceSpec {
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

    impl From<old::Instance> for newest::Instance {
        fn from(instance: old::Instance) -> Self {
            Self {
                instance_key: instance.instance_key,
                provider_id: instance.provider_id,
                region: instance.region,
                state: match instance.state {
                    old::InstanceState::Pending => newest::InstanceState::Pending,
                    old::InstanceState::Running => newest::InstanceState::Running,
                    old::InstanceState::Stopping => newest::InstanceState::Stopping,
                    old::InstanceState::Stopped => newest::InstanceState::Stopped,
                    old::InstanceState::Failed => newest::InstanceState::Failed,
                },
                address: instance.address,
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

    use super::v0_2::bulkhead::provider::host::LogLevel as OldLevel;
    use super::v0_3::bulkhead::provider::host::LogLevel as NewLevel;

    impl From<OldLevel> for NewLevel {
        fn from(level: OldLevel) -> Self {
            match level {
                OldLevel::Trace => NewLevel::Trace,
                OldLevel::Debug => NewLevel::Debug,
                OldLevel::Info => NewLevel::Info,
                OldLevel::Warn => NewLevel::Warn,
                OldLevel::Error => NewLevel::Error,
            }
        }
    }
}
