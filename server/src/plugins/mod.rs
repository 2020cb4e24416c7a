//! The plugin host: loads provider plugins (WebAssembly components of the `bulkhead:provider`
//! world, see `sdk/wit/`) and calls them in a sandbox.
//!
//! Every plugin is untrusted. Each call gets a fresh store and instance (from a pre-instantiated
//! component, so that nothing leaks between calls), a linear-memory cap, a deadline enforced by
//! epoch interruption, and a cap on concurrent calls. The plugin sees its own configuration and
//! secrets and nothing else: WASI is linked with no environment, no arguments, no files, no
//! sockets and no stdin; clocks and random numbers work. Outbound HTTP goes only to the
//! provider's allowlist, and every request ends with its call (see `outbound` for what bounds
//! them: the call itself, timeouts, 16 requests in flight). A trap, timeout, memory blow-up or
//! panic fails that one call with a [`PluginError`] naming the cause; the server and other
//! plugins go on.
//!
//! This module owns loading, validation and calling; [`registry`] holds each provider's active
//! plugin and swaps it. Storing binaries and providers' settings is the application's
//! (`app::providers`).

pub mod bundled;
mod cache;
pub mod connection_pool;
pub mod contract;
mod names;
mod outbound;
pub mod provider_cache;
pub mod registry;
mod sandbox;
pub mod tls_pins;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, UpdateDeadline,
};

pub use contract::SUPPORTED_CONTRACT_VERSIONS;
use contract::{AdapterPre, Answer, Call, v0_2, v0_3, v0_4, v0_5, v0_6, v0_7};
pub use outbound::{Allowlist, HostPattern, address_restricted, endpoint_patterns};
pub use provider_cache::ProviderCache;
pub use sandbox::PluginState;

pub use self::contract::v0_7::bulkhead::provider::types::{
    ConfigKey, GitSource, HealthCheck, HealthReport, HealthStatus, Instance, InstanceSize,
    InstanceSpec, InstanceState, LogLine, LogPage, LogRequest, LogStream, ProviderError,
    ProviderInfo, RateLimit, WorkloadHealth,
};

/// The export a plugin must have (with a supported version after `@`).
pub const ADAPTER_EXPORT: &str = "bulkhead:provider/adapter";
/// How often the epoch advances: the granularity of call deadlines.
const EPOCH_TICK: Duration = Duration::from_millis(10);
/// Plugin calls one host runs at once, all providers together: the instance pool is sized for
/// this many, and calls past it wait for a slot instead of failing.
pub const HOST_CONCURRENT_CALLS: usize = 128;
/// The part of the host's call capacity one provider may hold at once (its `max_concurrent_calls`
/// cannot exceed it): a busy provider leaves the other three quarters to the others, so its
/// load can neither fail nor stall their calls (and open their breakers).
pub fn provider_call_share(capacity: usize) -> usize {
    (capacity / 4).max(1)
}
/// What one call's component may use of the pool: a component needing more is refused when it
/// is loaded, never at a call under load.
const CORE_INSTANCES_PER_CALL: u32 = 16;
const MEMORIES_PER_CALL: u32 = 4;
const TABLES_PER_CALL: u32 = 16;

/// Limits of one plugin's calls.
#[derive(Debug, Clone)]
pub struct PluginLimits {
    /// Largest linear memory of an instance.
    pub memory_bytes: usize,
    /// Deadline of `health` and `info` calls.
    pub health_deadline: Duration,
    /// Deadline of every other call (provision, describe, ...).
    pub call_deadline: Duration,
    /// Calls of this plugin that may run at once; more wait.
    pub max_concurrent_calls: usize,
    /// Largest HTTP response body a call may read.
    pub http_response_bytes: u64,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 * 1024 * 1024,
            health_deadline: Duration::from_secs(2),
            call_deadline: Duration::from_secs(10),
            max_concurrent_calls: 16,
            http_response_bytes: 4 * 1024 * 1024,
        }
    }
}

/// What a plugin sees of its provider's settings. Shared by the calls of a provider (a call
/// holds an `Arc` of it), replaced as a whole when the provider's settings change.
#[derive(Debug, Clone, Default)]
pub struct PluginEnv {
    /// The provider's name, for logs and metrics.
    pub provider: Arc<str>,
    pub config: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
    /// Where its outbound HTTP requests may go.
    pub allowlist: Arc<Allowlist>,
    /// What its calls keep between them (contract 0.3.0's cache): dropped with these
    /// settings.
    pub cache: Arc<ProviderCache>,
    /// Its calls' idle connections (`connection_pool`): dropped with these settings too.
    pub connections: Arc<connection_pool::ConnectionPool>,
}

/// Why a plugin call failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The plugin answered with a typed error of the contract.
    #[error("provider error: {0:?}")]
    Provider(ProviderError),
    /// The call ran past its deadline and was stopped.
    #[error("the plugin did not answer within {0:?} and was stopped")]
    Timeout(Duration),
    /// The plugin tried to grow its memory past the cap.
    #[error("the plugin exceeded its memory limit of {0} bytes")]
    MemoryExceeded(usize),
    /// The plugin trapped (a panic, an out-of-bounds access, ...).
    #[error("the plugin crashed: {0}")]
    Trap(String),
    /// The host could not run the call.
    #[error("plugin host error: {0}")]
    Host(String),
}

/// Why a binary was refused at load.
#[derive(Debug, thiserror::Error)]
pub enum PluginRejection {
    #[error("not a WebAssembly component (a core module, or not WebAssembly at all): {0}")]
    NotAComponent(String),
    #[error(
        "the component does not export `{ADAPTER_EXPORT}` (it does not target the provider world); it exports: {0}"
    )]
    WrongWorld(String),
    #[error(
        "the component targets contract version {found}, but this host supports {supported} (build it with bulkhead-sdk of the same minor version, e.g. 0.7.x for 0.7.0)"
    )]
    UnsupportedVersion { found: String, supported: String },
    #[error("the component needs imports the host does not grant: {0}")]
    ForbiddenImports(String),
}

/// Call counts of a plugin, by outcome.
#[derive(Debug, Default)]
pub struct CallStats {
    pub ok: AtomicU64,
    pub provider_errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub memory_exceeded: AtomicU64,
    pub traps: AtomicU64,
}

/// A validated, compiled plugin, ready to be called.
pub struct Plugin {
    /// Hex SHA-256 of the component binary.
    pub digest: String,
    /// The contract version it was built for.
    pub contract_version: String,
    /// Whether the compiled code came from the compiled-code cache.
    pub from_cache: bool,
    pub limits: PluginLimits,
    /// Where its calls are counted (shared by the versions of a provider in the registry).
    pub stats: Arc<CallStats>,
    pre: AdapterPre,
    slots: Semaphore,
}

/// The engine and linker shared by all plugins, the epoch ticker behind call deadlines, and
/// the admission of calls (the host's capacity, and each provider's share of it).
pub struct PluginHost {
    engine: Engine,
    /// One permit per call the instance pool has room for.
    capacity: Arc<Semaphore>,
    /// Permits of [`provider_call_share`] per provider, by provider name.
    shares: std::sync::Mutex<std::collections::HashMap<Arc<str>, Arc<Semaphore>>>,
    share: usize,
    linker: Linker<PluginState>,
    cache: Option<cache::CodeCache>,
    /// Components compiled by this host, by digest: loading the same binary again (another
    /// provider, new limits) does not compile or deserialize it again.
    compiled: std::sync::Mutex<std::collections::HashMap<String, Component>>,
    ticker_stop: Arc<AtomicBool>,
    /// Looks up the names plugins' requests go to.
    names: names::NameResolver,
}

impl Drop for PluginHost {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl PluginHost {
    /// An engine with the component model, the pooling allocator (instances are recycled, with
    /// copy-on-write memory images) and epoch interruption; a linker with WASI (all
    /// capabilities denied) and the `bulkhead:provider/host` interface.
    ///
    /// With `code_cache`, compiled plugins are kept in that directory (see the `cache` module).
    pub fn new(code_cache: Option<&std::path::Path>) -> anyhow::Result<Self> {
        Self::with_capacity(code_cache, HOST_CONCURRENT_CALLS)
    }

    /// [`PluginHost::new`] with room for `calls` calls at once (tests use a small one).
    pub fn with_capacity(
        code_cache: Option<&std::path::Path>,
        calls: usize,
    ) -> anyhow::Result<Self> {
        let calls = calls.max(1);
        let slots = u32::try_from(calls)?;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .max_core_instances_per_component(CORE_INSTANCES_PER_CALL)
            .max_memories_per_component(MEMORIES_PER_CALL)
            .max_tables_per_component(TABLES_PER_CALL)
            .total_core_instances(slots * CORE_INSTANCES_PER_CALL)
            .total_memories(slots * MEMORIES_PER_CALL)
            .total_tables(slots * TABLES_PER_CALL)
            .max_memory_size(PluginLimits::default().memory_bytes.max(256 * 1024 * 1024))
            // Reset a used slot by rewriting the pages it dirtied (found with PAGEMAP_SCAN where
            // the kernel has it) instead of unmapping them: no page faults on the next call, and
            // no TLB shootdowns across cores when calls run in parallel.
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(2 * 1024 * 1024)
            .table_keep_resident(64 * 1024)
            .decommit_batch_size(16);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .memory_init_cow(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(|err| anyhow::anyhow!("wasm engine: {err}"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|err| anyhow::anyhow!("link WASI: {err}"))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|err| anyhow::anyhow!("link WASI HTTP: {err}"))?;
        // Every supported contract version's host interface, side by side.
        macro_rules! link_contract {
            ($version:ident) => {
                $version::bulkhead::provider::types::add_to_linker::<
                    PluginState,
                    HasSelf<PluginState>,
                >(&mut linker, |state| state)
                .and_then(|()| {
                    $version::bulkhead::provider::host::add_to_linker::<
                        PluginState,
                        HasSelf<PluginState>,
                    >(&mut linker, |state| state)
                })
            };
        }
        link_contract!(v0_7)
            .and_then(|()| link_contract!(v0_6))
            .and_then(|()| link_contract!(v0_5))
            .and_then(|()| link_contract!(v0_4))
            .and_then(|()| link_contract!(v0_3))
            .and_then(|()| link_contract!(v0_2))
            .map_err(|err| anyhow::anyhow!("link the host interfaces: {err}"))?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (stop, weak) = (ticker_stop.clone(), engine.weak());
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })?;
        let cache = code_cache
            .map(|dir| cache::CodeCache::new(dir, &engine))
            .transpose()?;
        Ok(Self {
            engine,
            capacity: Arc::new(Semaphore::new(calls)),
            shares: Default::default(),
            share: provider_call_share(calls),
            linker,
            cache,
            compiled: Default::default(),
            ticker_stop,
            names: names::NameResolver::system(),
        })
    }

    /// Validates and compiles a component binary.
    pub fn plugin_load(
        &self,
        bytes: &[u8],
        limits: PluginLimits,
    ) -> Result<Plugin, PluginRejection> {
        let digest = hex::encode(Sha256::digest(bytes));
        let (component, from_cache) = self.component(bytes, &digest)?;
        let contract_version = contract_version_check(&self.engine, &component)?;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|err| PluginRejection::ForbiddenImports(format!("{err:#}")))?;
        let wrong_world = |err: wasmtime::Error| PluginRejection::WrongWorld(format!("{err:#}"));
        let pre = match contract_version.as_str() {
            "0.2.0" => AdapterPre::V0_2(v0_2::ProviderPre::new(instance_pre).map_err(wrong_world)?),
            "0.3.0" => AdapterPre::V0_3(v0_3::ProviderPre::new(instance_pre).map_err(wrong_world)?),
            "0.4.0" => AdapterPre::V0_4(v0_4::ProviderPre::new(instance_pre).map_err(wrong_world)?),
            "0.5.0" => AdapterPre::V0_5(v0_5::ProviderPre::new(instance_pre).map_err(wrong_world)?),
            "0.6.0" => AdapterPre::V0_6(v0_6::ProviderPre::new(instance_pre).map_err(wrong_world)?),
            _ => AdapterPre::V0_7(v0_7::ProviderPre::new(instance_pre).map_err(wrong_world)?),
        };
        Ok(Plugin {
            digest,
            from_cache,
            contract_version,
            slots: Semaphore::new(limits.max_concurrent_calls.max(1)),
            limits,
            stats: Arc::default(),
            pre,
        })
    }

    fn component(&self, bytes: &[u8], digest: &str) -> Result<(Component, bool), PluginRejection> {
        if let Some(component) = self.compiled.lock().expect("not poisoned").get(digest) {
            return Ok((component.clone(), true));
        }
        let (component, from_cache) = match &self.cache {
            Some(cache) => cache.component(&self.engine, bytes, digest),
            None => Component::new(&self.engine, bytes).map(|component| (component, false)),
        }
        .map_err(|err| PluginRejection::NotAComponent(err.to_string()))?;
        self.compiled
            .lock()
            .expect("not poisoned")
            .insert(digest.to_owned(), component.clone());
        Ok((component, from_cache))
    }

    pub async fn plugin_info(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
    ) -> Result<ProviderInfo, PluginError> {
        self.call_answering(plugin, env, Call::Info, |answer| match answer {
            Answer::Info(info) => Some(info),
            _ => None,
        })
        .await
    }

    pub async fn plugin_health(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
    ) -> Result<HealthReport, PluginError> {
        self.call_answering(plugin, env, Call::Health, |answer| match answer {
            Answer::Health(report) => Some(report),
            _ => None,
        })
        .await
    }

    pub async fn plugin_provision(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
        spec: InstanceSpec,
    ) -> Result<Instance, PluginError> {
        self.call_answering(plugin, env, Call::Provision(spec), |answer| match answer {
            Answer::Instance(instance) => Some(instance),
            _ => None,
        })
        .await
    }

    pub async fn plugin_deprovision(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
        key: String,
    ) -> Result<(), PluginError> {
        self.call_answering(plugin, env, Call::Deprovision(key), |answer| match answer {
            Answer::Done => Some(()),
            _ => None,
        })
        .await
    }

    pub async fn plugin_describe(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
        key: String,
    ) -> Result<Instance, PluginError> {
        self.call_answering(plugin, env, Call::Describe(key), |answer| match answer {
            Answer::Instance(instance) => Some(instance),
            _ => None,
        })
        .await
    }

    pub async fn plugin_list(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
    ) -> Result<Vec<Instance>, PluginError> {
        self.call_answering(plugin, env, Call::List, |answer| match answer {
            Answer::Instances(instances) => Some(instances),
            _ => None,
        })
        .await
    }

    /// A page of the output of the instance of `key` (contract 0.5.0's `logs`).
    pub async fn plugin_logs(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
        key: String,
        request: LogRequest,
    ) -> Result<LogPage, PluginError> {
        self.call_answering(
            plugin,
            env,
            Call::Logs(key, request),
            |answer| match answer {
                Answer::Logs(page) => Some(page),
                _ => None,
            },
        )
        .await
    }

    /// Runs `call` under its deadline (probes, `info` and `health`, have the shorter one) and
    /// takes the answer `expected` reads; an adapter that answers another kind of answer is a
    /// host error.
    async fn call_answering<T>(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
        call: Call,
        expected: fn(Answer) -> Option<T>,
    ) -> Result<T, PluginError> {
        let name = call.name();
        let deadline = match call {
            Call::Info | Call::Health => plugin.limits.health_deadline,
            _ => plugin.limits.call_deadline,
        };
        let answer = self.call(plugin, env, deadline, call).await?;
        expected(answer).ok_or_else(|| {
            PluginError::Host(format!(
                "the adapter answered `{name}` with another kind of answer"
            ))
        })
    }

    /// Runs one call in a fresh store: waits for a call slot, instantiates, calls `f` under the
    /// deadline and memory cap, and classifies the outcome.
    async fn call(
        &self,
        plugin: &Plugin,
        env: &Arc<PluginEnv>,
        deadline: Duration,
        call: Call,
    ) -> Result<Answer, PluginError> {
        // The plugin's own limit, then its provider's share of the host, then a place in the
        // pool: a call waits for each in turn, so one provider's queue never holds the host's
        // permits that another provider's calls need.
        let closed = |err: tokio::sync::AcquireError| PluginError::Host(err.to_string());
        let _slot = plugin.slots.acquire().await.map_err(closed)?;
        let share = self.provider_share(&env.provider);
        let _share = share.acquire().await.map_err(closed)?;
        let _capacity = self.capacity.acquire().await.map_err(closed)?;
        let mut store = Store::new(
            &self.engine,
            PluginState::new(env, &plugin.limits, deadline, self.names.clone()),
        );
        store.limiter(|state| state.limiter());
        // At every epoch tick a running plugin yields to the executor, so that a busy plugin
        // never holds a worker thread for long, and is interrupted once its deadline passes.
        let deadline_at = std::time::Instant::now() + deadline;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            Ok(if std::time::Instant::now() >= deadline_at {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        // Epoch interruption stops a plugin that computes; a plugin waiting on the host (an
        // outbound HTTP request) runs no Wasm, so the same deadline also bounds the whole call.
        let outcome = tokio::time::timeout(deadline, plugin.pre.call(&mut store, call)).await;
        let result = match outcome {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(provider_error))) => Err(PluginError::Provider(provider_error)),
            Ok(Err(err)) => Err(classify(err, &store, deadline)),
            Err(_elapsed) => Err(PluginError::Timeout(deadline)),
        };
        // Dropping the store aborts whatever the plugin left in flight; the call's slots are
        // given back only once those requests are gone, their sockets closed.
        let requests = store.data().outbound_requests();
        drop(store);
        requests.dropped(&env.provider).await;
        let (counter, outcome) = match &result {
            Ok(_) => (&plugin.stats.ok, "ok"),
            Err(PluginError::Provider(_)) => (&plugin.stats.provider_errors, "provider_error"),
            Err(PluginError::Timeout(_)) => (&plugin.stats.timeouts, "timeout"),
            Err(PluginError::MemoryExceeded(_)) => {
                (&plugin.stats.memory_exceeded, "memory_exceeded")
            }
            Err(PluginError::Trap(_)) => (&plugin.stats.traps, "trap"),
            Err(PluginError::Host(_)) => (&plugin.stats.traps, "host_error"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("plugin_calls_total", "provider" => env.provider.clone(), "outcome" => outcome).increment(1);
        if let Err(err) = &result
            && !matches!(err, PluginError::Provider(_))
        {
            tracing::warn!(provider = %env.provider, error = %err, "plugin call failed");
        }
        result
    }
}

impl PluginHost {
    /// How many calls one provider may run at once on this host.
    pub fn provider_share_size(&self) -> usize {
        self.share
    }

    fn provider_share(&self, provider: &Arc<str>) -> Arc<Semaphore> {
        self.shares
            .lock()
            .expect("not poisoned")
            .entry(provider.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
            .clone()
    }
}

/// An answer of another kind than the call's: a bug of the host's adaptation, not the plugin's.
fn classify(err: wasmtime::Error, store: &Store<PluginState>, deadline: Duration) -> PluginError {
    if store.data().memory_exceeded() {
        return PluginError::MemoryExceeded(store.data().memory_cap());
    }
    match err.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => PluginError::Timeout(deadline),
        Some(trap) => PluginError::Trap(format!("{trap}: {err:#}")),
        None => PluginError::Trap(format!("{err:#}")),
    }
}

/// What `bulkhead plugin inspect` shows of a binary.
#[derive(Debug)]
pub struct Inspection {
    pub size: usize,
    pub digest: String,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// The contract version if the host would load it, or why not.
    pub verdict: Result<String, PluginRejection>,
}

impl PluginHost {
    /// Describes a binary and says whether [`PluginHost::plugin_load`] would accept it.
    pub fn plugin_inspect(&self, bytes: &[u8]) -> Inspection {
        let digest = hex::encode(Sha256::digest(bytes));
        let (imports, exports) = match Component::new(&self.engine, bytes) {
            Ok(component) => {
                let ty = component.component_type();
                (
                    ty.imports(&self.engine)
                        .map(|(name, _)| name.to_owned())
                        .collect(),
                    ty.exports(&self.engine)
                        .map(|(name, _)| name.to_owned())
                        .collect(),
                )
            }
            Err(_) => (Vec::new(), Vec::new()),
        };
        let verdict = self
            .plugin_load(bytes, PluginLimits::default())
            .map(|plugin| plugin.contract_version);
        Inspection {
            size: bytes.len(),
            digest,
            imports,
            exports,
            verdict,
        }
    }
}

/// Checks that the component exports the adapter at a supported contract version, and returns
/// that version.
fn contract_version_check(
    engine: &Engine,
    component: &Component,
) -> Result<String, PluginRejection> {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let Some(export) = exports
        .iter()
        .find(|name| name.split('@').next() == Some(ADAPTER_EXPORT))
    else {
        return Err(PluginRejection::WrongWorld(exports.join(", ")));
    };
    let version = export.split('@').nth(1).unwrap_or_default().to_owned();
    if !SUPPORTED_CONTRACT_VERSIONS.contains(&version.as_str()) {
        return Err(PluginRejection::UnsupportedVersion {
            found: version,
            supported: SUPPORTED_CONTRACT_VERSIONS.join(", "),
        });
    }
    Ok(version)
}
