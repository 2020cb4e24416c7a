//! The state of one plugin call: WASI with every capability denied, outbound HTTP through the
//! provider's allowlist, the plugin's own configuration and secrets, and the memory limiter.

use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::PluginEnv;
use super::bulkhead::provider::host::{Host, LogLevel};
use super::outbound::OutboundPolicy;

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
    pub(super) fn new(env: &Arc<PluginEnv>, limits: &super::PluginLimits) -> Self {
        // No environment, arguments, preopened directories or stdin; stdout and stderr go
        // nowhere; sockets and name lookups are refused by the builder's defaults.
        let wasi = WasiCtx::builder().build();
        Self {
            outbound: OutboundPolicy {
                provider: env.provider.clone(),
                allowlist: env.allowlist.clone(),
                response_bytes: limits.http_response_bytes,
            },
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

impl super::bulkhead::provider::types::Host for PluginState {}

impl Host for PluginState {
    fn log(&mut self, level: LogLevel, message: String) {
        let message: String = message.chars().take(4096).collect();
        let provider = &*self.env.provider;
        match level {
            LogLevel::Trace | LogLevel::Debug => tracing::debug!(provider, plugin_log = %message),
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
}
