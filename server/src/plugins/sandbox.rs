//! The state of one plugin call: WASI with every capability denied, outbound HTTP through the
//! provider's allowlist (its requests owned by this state, so that they end with the call; see
//! `super::outbound`), the plugin's own configuration, secrets and cache, and the memory
//! limiter. The host interface of every supported contract version is served here (older
//! versions by the newest's functions).

use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::PluginEnv;
use super::contract::{v0_2, v0_3, v0_4, v0_5, v0_6, v0_7};
use super::outbound::{CallRequests, OutboundPolicy};
use v0_7::bulkhead::provider::host::{Host, LogLevel};

/// Per-call store data.
pub struct PluginState {
    env: Arc<PluginEnv>,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    outbound: OutboundPolicy,
    table: ResourceTable,
    memory: MemoryCap,
}

struct MemoryCap {
    max_bytes: usize,
    exceeded: bool,
}

impl PluginState {
    /// The state of a call that has `deadline` to run.
    pub(super) fn new(
        env: &Arc<PluginEnv>,
        limits: &super::PluginLimits,
        deadline: std::time::Duration,
        names: super::names::NameResolver,
    ) -> Self {
        // No environment, arguments, preopened directories or stdin; stdout and stderr go
        // nowhere; sockets and name lookups are refused by the builder's defaults.
        let wasi = WasiCtx::builder().build();
        Self {
            outbound: OutboundPolicy::new(
                env.provider.clone(),
                env.allowlist.clone(),
                limits.http_response_bytes,
                super::tls_pins::client_config(&env.config),
                deadline,
                names,
                env.connections.clone(),
            ),
            env: env.clone(),
            wasi,
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            memory: MemoryCap {
                max_bytes: limits.memory_bytes,
                exceeded: false,
            },
        }
    }

    pub(super) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.memory
    }

    pub(super) fn memory_exceeded(&self) -> bool {
        self.memory.exceeded
    }

    pub(super) fn memory_cap(&self) -> usize {
        self.memory.max_bytes
    }

    /// The call's outbound requests, for its end to wait on once this state is dropped.
    pub(super) fn outbound_requests(&self) -> CallRequests {
        self.outbound.requests()
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.exceeded = true;
            wasmtime::bail!(
                "memory limit of {} bytes exceeded (asked for {desired})",
                self.max_bytes
            );
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outbound,
        }
    }
}

impl v0_7::bulkhead::provider::types::Host for PluginState {}
impl v0_6::bulkhead::provider::types::Host for PluginState {}
impl v0_5::bulkhead::provider::types::Host for PluginState {}
impl v0_4::bulkhead::provider::types::Host for PluginState {}
impl v0_3::bulkhead::provider::types::Host for PluginState {}
impl v0_2::bulkhead::provider::types::Host for PluginState {}

impl Host for PluginState {
    fn log(&mut self, level: LogLevel, message: String) {
        let message: String = message.chars().take(4096).collect();
        let provider = &*self.env.provider;
        match level {
            LogLevel::Trace => tracing::trace!(provider, plugin_log = %message),
            LogLevel::Debug => tracing::debug!(provider, plugin_log = %message),
            LogLevel::Info => tracing::info!(provider, plugin_log = %message),
            LogLevel::Warn => tracing::warn!(provider, plugin_log = %message),
            LogLevel::Error => tracing::error!(provider, plugin_log = %message),
        }
    }

    fn config_get(&mut self, key: String) -> Option<String> {
        self.env.config.get(&key).cloned()
    }

    fn secret_get(&mut self, key: String) -> Option<String> {
        self.env.secrets.get(&key).cloned()
    }

    fn cache_get(&mut self, key: String) -> Option<Vec<u8>> {
        self.env.cache.get(&key, std::time::Instant::now())
    }

    fn cache_set(&mut self, key: String, value: Vec<u8>, ttl_secs: u32) -> Result<(), String> {
        let ttl = std::time::Duration::from_secs(ttl_secs.into());
        self.env
            .cache
            .set(&key, value, ttl, std::time::Instant::now())
    }
}

/// The host interface of contracts 0.3.0 to 0.6.0: the same functions.
macro_rules! host_with_cache {
    ($version:ident) => {
        impl $version::bulkhead::provider::host::Host for PluginState {
            fn log(
                &mut self,
                level: $version::bulkhead::provider::host::LogLevel,
                message: String,
            ) {
                Host::log(self, level.into(), message)
            }

            fn config_get(&mut self, key: String) -> Option<String> {
                Host::config_get(self, key)
            }

            fn secret_get(&mut self, key: String) -> Option<String> {
                Host::secret_get(self, key)
            }

            fn cache_get(&mut self, key: String) -> Option<Vec<u8>> {
                Host::cache_get(self, key)
            }

            fn cache_set(
                &mut self,
                key: String,
                value: Vec<u8>,
                ttl_secs: u32,
            ) -> Result<(), String> {
                Host::cache_set(self, key, value, ttl_secs)
            }
        }
    };
}
host_with_cache!(v0_6);
host_with_cache!(v0_5);
host_with_cache!(v0_4);
host_with_cache!(v0_3);

/// Contract 0.2.0's host interface: the same functions (it has no cache).
impl v0_2::bulkhead::provider::host::Host for PluginState {
    fn log(&mut self, level: v0_2::bulkhead::provider::host::LogLevel, message: String) {
        Host::log(self, level.into(), message)
    }

    fn config_get(&mut self, key: String) -> Option<String> {
        Host::config_get(self, key)
    }

    fn secret_get(&mut self, key: String) -> Option<String> {
        Host::secret_get(self, key)
    }
}
