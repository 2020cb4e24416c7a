//! The SDK for Bulkhead provider plugins: WebAssembly components of the
//! `bulkhead:provider@0.7.0` contract ([`CONTRACT_VERSION`]), written in Rust.
//!
//! A plugin is a type that implements [`Provider`], exported with [`export_provider!`]:
//!
//! ```
//! use bulkhead_sdk::{ConfigKey, Instance, InstanceSpec, InstanceState, Provider, ProviderError, ProviderInfo, WorkloadHealth};
//!
//! pub struct Example;
//!
//! impl Provider for Example {
//!     fn info() -> ProviderInfo {
//!         ProviderInfo {
//!             name: "example".into(),
//!             version: env!("CARGO_PKG_VERSION").into(),
//!             regions: vec!["local".into()],
//!             capabilities: vec![],
//!             config: vec![ConfigKey::required("endpoint", "Base URL of the API")],
//!         }
//!     }
//!
//!     fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
//!         let endpoint = bulkhead_sdk::config_required("endpoint")?;
//!         bulkhead_sdk::info!("provisioning {} at {endpoint}", spec.instance_key);
//!         Ok(Instance {
//!             provider_id: format!("ex-{}", spec.instance_key),
//!             instance_key: spec.instance_key,
//!             region: spec.region,
//!             state: InstanceState::Pending,
//!             address: None,
//!             health: WorkloadHealth::Unchecked,
//!             detail: None,
//!             machine_type: None,
//!         })
//!     }
//!
//!     fn deprovision(_key: String) -> Result<(), ProviderError> { Ok(()) }
//!     fn describe(key: String) -> Result<Instance, ProviderError> { Err(ProviderError::NotFound(key)) }
//!     fn list() -> Result<Vec<Instance>, ProviderError> { Ok(vec![]) }
//! }
//!
//! bulkhead_sdk::export_provider!(Example);
//! # bulkhead_sdk::testing::set_config("endpoint", "http://127.0.0.1:9000");
//! # assert!(Example::provision(InstanceSpec::new("web-1", "local", "app:1", 8080)).is_ok());
//! ```
//!
//! `cargo build --release --target wasm32-wasip2` then yields the component. The generated
//! bindings stay inside this crate: plugins use the re-exported types, [`config`],
//! [`config_required`], [`secret`], [`cache`], [`http`] and the logging macros. On a native
//! target (unit tests), configuration, secrets, the cache, HTTP and logs go to the in-memory
//! [`testing`] host instead of the Bulkhead host, so that plugin logic can be tested with
//! `cargo test` and no Wasm build.
//!
//! [`serde`] is re-exported (with `derive`), for the types of a provider's API:
//! `#[derive(bulkhead_sdk::serde::Deserialize)] #[serde(crate = "bulkhead_sdk::serde")]`, or
//! depend on `serde` yourself (as the scaffold of `bulkhead plugin new` does).

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "provider",
        pub_export_macro: true,
        default_bindings_module: "bulkhead_sdk::bindings",
        // The standard `wasi:http` the world imports, generated here so that its version is
        // exactly the contract's.
        generate_all,
    });
}

pub mod cache;
pub mod http;

/// Every Rust snippet of the README, compiled (and run) as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

use std::marker::PhantomData;
use std::str::FromStr;

pub use bindings::bulkhead::provider::host::LogLevel;
pub use bindings::bulkhead::provider::types::{
    ConfigKey, GitSource, HealthCheck, HealthReport, HealthStatus, Instance, InstanceSize,
    InstanceSpec, InstanceState, LogLine, LogPage, LogRequest, LogStream, ProviderError,
    ProviderInfo, RateLimit, WorkloadHealth,
};
pub use serde;

/// The version of the `bulkhead:provider` contract this SDK builds plugins for. The component
/// carries it in its export's name (`bulkhead:provider/adapter@0.7.0`): Bulkhead checks it when
/// it loads the plugin, and refuses a version it does not support, naming the ones it does.
pub const CONTRACT_VERSION: &str = "0.7.0";

impl InstanceSpec {
    /// A spec with no environment and no labels, sized half a vCPU and 512 MiB (tests,
    /// mostly).
    pub fn new(
        instance_key: impl Into<String>,
        region: impl Into<String>,
        artifact: impl Into<String>,
        port: u16,
    ) -> Self {
        Self {
            instance_key: instance_key.into(),
            region: region.into(),
            artifact: artifact.into(),
            port,
            env: Vec::new(),
            labels: Vec::new(),
            health_check: None,
            source: None,
            size: InstanceSize {
                cpu_millis: 500,
                memory_mib: 512,
            },
        }
    }
}

impl InstanceSize {
    /// The first type of `table` that holds this size: its CPU (thousandths of a vCPU) and its
    /// memory (MiB) at least this size's. List a cloud's types cheapest first, as
    /// `(name, cpu_millis, memory_mib)`, and this is the cheapest that fits; `None` when none
    /// does (answer `invalid-spec`).
    pub fn fitting<'a>(&self, table: &'a [(&'a str, u32, u32)]) -> Option<&'a str> {
        table
            .iter()
            .find(|(_, cpu_millis, memory_mib)| {
                *cpu_millis >= self.cpu_millis && *memory_mib >= self.memory_mib
            })
            .map(|(name, ..)| *name)
    }
}

impl ConfigKey {
    /// A configuration value the plugin cannot work without.
    pub fn required(name: &str, description: &str) -> Self {
        Self {
            name: name.into(),
            required: true,
            secret: false,
            description: description.into(),
        }
    }

    /// A configuration value with a default.
    pub fn optional(name: &str, description: &str) -> Self {
        Self {
            required: false,
            ..Self::required(name, description)
        }
    }

    /// A secret (credentials) the plugin cannot work without.
    pub fn secret(name: &str, description: &str) -> Self {
        Self {
            secret: true,
            ..Self::required(name, description)
        }
    }
}

/// A provider adapter. Methods are associated functions: a plugin keeps no state between calls
/// (each call runs in a fresh instance), everything it needs comes from its configuration,
/// its secrets and the provider's API.
pub trait Provider {
    /// Name, version, regions and capabilities of the plugin.
    fn info() -> ProviderInfo;

    /// Whether the provider's API can be used now. The default says healthy without checking.
    fn health() -> Result<HealthReport, ProviderError> {
        Ok(HealthReport {
            status: HealthStatus::Healthy,
            message: String::new(),
        })
    }

    /// Creates the instance of `spec.instance_key`, or returns the one already made for it.
    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError>;

    /// Deletes the instance of `instance_key`; deleting a deleted instance succeeds.
    fn deprovision(instance_key: String) -> Result<(), ProviderError>;

    /// The instance of `instance_key`.
    fn describe(instance_key: String) -> Result<Instance, ProviderError>;

    /// Every instance made for the control plane.
    fn list() -> Result<Vec<Instance>, ProviderError>;

    /// A page of the output of the instance of `instance_key`, for a plugin that declares the
    /// `logs` capability. The default has no logs.
    fn logs(instance_key: String, request: LogRequest) -> Result<LogPage, ProviderError> {
        let _ = (instance_key, request);
        Err(ProviderError::InvalidSpec(
            "this plugin has no logs (no `logs` capability)".into(),
        ))
    }
}

impl LogRequest {
    /// A request for the lines after `after` (none: the newest lines), at most `max_lines`
    /// of them and 64 KiB.
    pub fn new(after: Option<String>, max_lines: u32) -> Self {
        Self {
            after,
            since_ms: None,
            max_lines,
            max_bytes: 64 * 1024,
        }
    }

    /// The newest of `items` (oldest first) that fit the request's bounds, for a page without
    /// a cursor: the last `max_lines`, and `max_bytes` of text counted from the newest (a newest
    /// line alone longer than that is cut). `line` finds each item's line (an item may carry
    /// more, such as the position a cursor is made from).
    pub fn newest<T>(&self, mut items: Vec<T>, line: impl Fn(&mut T) -> &mut LogLine) -> Vec<T> {
        let mut bytes = 0usize;
        let mut first = items.len();
        while first > 0 && items.len() - first < self.max_lines as usize {
            let size = line(&mut items[first - 1]).text.len();
            if bytes + size > self.max_bytes as usize && first < items.len() {
                break;
            }
            bytes += size;
            first -= 1;
        }
        let mut kept = items.split_off(first);
        if let [only] = kept.as_mut_slice() {
            let only = line(only);
            if let Some(cut) = self.bounded([only.clone()]).pop() {
                *only = cut;
            }
        }
        kept
    }

    /// The lines of `lines` (oldest first) that fit the request's bounds, from the first: at
    /// most `max_lines`, and `max_bytes` of text in all (a first line longer than that is cut).
    pub fn bounded(&self, lines: impl IntoIterator<Item = LogLine>) -> Vec<LogLine> {
        let mut page = Vec::new();
        let mut bytes = 0usize;
        let max_bytes = self.max_bytes as usize;
        for mut line in lines {
            if page.len() >= self.max_lines as usize {
                break;
            }
            if bytes + line.text.len() > max_bytes {
                if !page.is_empty() {
                    break;
                }
                let mut cut = max_bytes;
                while !line.text.is_char_boundary(cut) {
                    cut -= 1;
                }
                line.text.truncate(cut);
            }
            bytes += line.text.len();
            page.push(line);
        }
        page
    }
}

/// Adapts a [`Provider`] to the generated bindings. Used by [`export_provider!`].
#[doc(hidden)]
pub struct Adapter<P>(PhantomData<P>);

impl<P: Provider> bindings::exports::bulkhead::provider::adapter::Guest for Adapter<P> {
    fn info() -> ProviderInfo {
        P::info()
    }

    fn health() -> Result<HealthReport, ProviderError> {
        P::health()
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        P::provision(spec)
    }

    fn deprovision(instance_key: String) -> Result<(), ProviderError> {
        P::deprovision(instance_key)
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        P::describe(instance_key)
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        P::list()
    }

    fn logs(instance_key: String, request: LogRequest) -> Result<LogPage, ProviderError> {
        P::logs(instance_key, request)
    }
}

/// Exports a [`Provider`] implementation as the plugin's `bulkhead:provider/adapter`.
#[macro_export]
macro_rules! export_provider {
    ($provider:ty) => {
        // Only a Wasm build exports: native builds (unit tests of the plugin) call the
        // `Provider` methods directly, and component export names are not native symbols.
        #[cfg(target_family = "wasm")]
        type __BulkheadProviderAdapter = $crate::Adapter<$provider>;
        #[cfg(target_family = "wasm")]
        $crate::bindings::export!(__BulkheadProviderAdapter with_types_in $crate::bindings);
    };
}

/// A value of the plugin's configuration.
pub fn config(key: &str) -> Option<String> {
    #[cfg(target_family = "wasm")]
    return bindings::bulkhead::provider::host::config_get(key);
    #[cfg(not(target_family = "wasm"))]
    return testing::config_get(key);
}

/// A configuration value the plugin cannot work without: a missing (or empty) one is a
/// [`ProviderError::Misconfigured`] naming it, which Bulkhead shows the operator.
pub fn config_required(key: &str) -> Result<String, ProviderError> {
    config(key)
        .filter(|value| !value.trim().is_empty())
        .ok_or_else(|| {
            ProviderError::Misconfigured(format!("the configuration value `{key}` is not set"))
        })
}

/// A configuration value parsed as `T` (a number, a bool, ...): `None` when unset, and a
/// [`ProviderError::Misconfigured`] naming the key and the value when it does not parse.
pub fn config_parse<T: FromStr>(key: &str) -> Result<Option<T>, ProviderError>
where
    T::Err: std::fmt::Display,
{
    match config(key) {
        None => Ok(None),
        Some(text) => text.trim().parse().map(Some).map_err(|err| {
            ProviderError::Misconfigured(format!(
                "the configuration value `{key}` = `{text}` is not valid: {err}"
            ))
        }),
    }
}

/// A secret the plugin cannot work without: a missing one is a
/// [`ProviderError::Misconfigured`] naming it (never its value).
pub fn secret_required(key: &str) -> Result<String, ProviderError> {
    secret(key)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| ProviderError::Misconfigured(format!("the secret `{key}` is not set")))
}

/// A comma-separated configuration value as a list (items trimmed, empty ones dropped), or
/// `default` when it is unset or empty: e.g. `config_list("regions", &["us-east-1"])`.
pub fn config_list(key: &str, default: &[&str]) -> Vec<String> {
    let items: Vec<String> = config(key)
        .unwrap_or_default()
        .split(',')
        .map(|item| item.trim().to_owned())
        .filter(|item| !item.is_empty())
        .collect();
    if items.is_empty() {
        default.iter().map(|item| (*item).to_owned()).collect()
    } else {
        items
    }
}

/// A secret of the plugin (credentials). Never log it.
pub fn secret(key: &str) -> Option<String> {
    #[cfg(target_family = "wasm")]
    return bindings::bulkhead::provider::host::secret_get(key);
    #[cfg(not(target_family = "wasm"))]
    return testing::secret_get(key);
}

/// Writes a line to the control plane's log. The macros [`info!`] and friends format for you.
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_family = "wasm")]
    bindings::bulkhead::provider::host::log(level, message);
    #[cfg(not(target_family = "wasm"))]
    testing::log(level, message);
}

/// Logs at `info` level, with `format!` arguments.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log($crate::LogLevel::Info, &format!($($arg)*)) };
}

/// Logs at `warn` level, with `format!` arguments.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log($crate::LogLevel::Warn, &format!($($arg)*)) };
}

/// Logs at `error` level, with `format!` arguments.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log($crate::LogLevel::Error, &format!($($arg)*)) };
}

/// Logs at `trace` level, with `format!` arguments (shown when Bulkhead logs at trace level).
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => { $crate::log($crate::LogLevel::Trace, &format!($($arg)*)) };
}

/// Logs at `debug` level, with `format!` arguments.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log($crate::LogLevel::Debug, &format!($($arg)*)) };
}

/// An in-memory host for unit tests of plugin logic on a native target: set the configuration
/// and secrets a test needs and a fake of the provider's HTTP API, call the `Provider` methods
/// directly, read what was logged.
#[cfg(not(target_family = "wasm"))]
pub mod testing {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    use super::LogLevel;
    use crate::http::{HttpError, Request, Response};

    type HttpHandler = Box<dyn FnMut(&Request) -> Result<Response, HttpError>>;

    thread_local! {
        static HTTP: RefCell<Option<HttpHandler>> = const { RefCell::new(None) };
        static CONFIG: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
        static SECRETS: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
        static LOGS: RefCell<Vec<(LogLevel, String)>> = const { RefCell::new(Vec::new()) };
        static CACHE: RefCell<HashMap<String, (Vec<u8>, Instant)>> = RefCell::new(HashMap::new());
    }

    /// Empties this thread's cache (as Bulkhead does when a provider's settings change).
    pub fn cache_clear() {
        CACHE.with(|c| c.borrow_mut().clear());
    }

    pub(crate) fn cache_get(key: &str) -> Option<Vec<u8>> {
        CACHE.with(|c| {
            c.borrow()
                .get(key)
                .filter(|(_, expires)| *expires > Instant::now())
                .map(|(value, _)| value.clone())
        })
    }

    pub(crate) fn cache_set(key: &str, value: &[u8], ttl_secs: u32) -> Result<(), String> {
        let expires = Instant::now() + Duration::from_secs(ttl_secs.into());
        CACHE.with(|c| c.borrow_mut().insert(key.into(), (value.to_vec(), expires)));
        Ok(())
    }

    /// Sets a configuration value for this thread's test.
    pub fn set_config(key: &str, value: &str) {
        CONFIG.with(|c| c.borrow_mut().insert(key.into(), value.into()));
    }

    /// Sets a secret for this thread's test.
    pub fn set_secret(key: &str, value: &str) {
        SECRETS.with(|c| c.borrow_mut().insert(key.into(), value.into()));
    }

    /// Takes the lines logged so far on this thread.
    pub fn logs_take() -> Vec<(LogLevel, String)> {
        LOGS.with(|l| std::mem::take(&mut *l.borrow_mut()))
    }

    /// Answers this thread's outbound HTTP requests with `handler` (a fake of the provider's
    /// API). Without one, requests fail as refused by the host.
    pub fn set_http_handler(
        handler: impl FnMut(&Request) -> Result<Response, HttpError> + 'static,
    ) {
        HTTP.with(|h| *h.borrow_mut() = Some(Box::new(handler)));
    }

    pub(crate) fn http_send(request: Request) -> Result<Response, HttpError> {
        HTTP.with(|h| match h.borrow_mut().as_mut() {
            Some(handler) => handler(&request),
            None => Err(HttpError::Denied(request.url.clone())),
        })
    }

    pub(crate) fn config_get(key: &str) -> Option<String> {
        CONFIG.with(|c| c.borrow().get(key).cloned())
    }

    pub(crate) fn secret_get(key: &str) -> Option<String> {
        SECRETS.with(|c| c.borrow().get(key).cloned())
    }

    pub(crate) fn log(level: LogLevel, message: &str) {
        LOGS.with(|l| l.borrow_mut().push((level, message.to_owned())));
    }
}

#[cfg(test)]
mod tests {
    use super::{LogLine, LogRequest, LogStream, ProviderError};

    #[test]
    fn typed_config_access_names_what_is_missing_or_wrong() {
        assert!(matches!(
            super::config_required("endpoint"),
            Err(ProviderError::Misconfigured(m)) if m.contains("`endpoint`")
        ));
        super::testing::set_config("endpoint", "http://x");
        assert_eq!(super::config_required("endpoint").unwrap(), "http://x");
        assert_eq!(super::config_parse::<u16>("port").unwrap(), None);
        super::testing::set_config("port", "80a");
        assert!(matches!(
            super::config_parse::<u16>("port"),
            Err(ProviderError::Misconfigured(m)) if m.contains("`port` = `80a`")
        ));
        super::testing::set_config("port", " 8080 ");
        assert_eq!(super::config_parse::<u16>("port").unwrap(), Some(8080));
        super::testing::set_secret("token", "s3cret");
        assert_eq!(super::secret_required("token").unwrap(), "s3cret");
        assert!(matches!(
            super::secret_required("other"),
            Err(ProviderError::Misconfigured(m)) if !m.contains("s3cret")
        ));
    }

    #[test]
    fn trace_logs_at_trace_level() {
        crate::trace!("step {}", 1);
        assert_eq!(
            super::testing::logs_take(),
            [(super::LogLevel::Trace, "step 1".to_owned())]
        );
    }

    #[test]
    fn the_newest_lines_that_fit_are_kept_counting_from_the_newest() {
        let line = |text: &str| LogLine {
            time_ms: 0,
            stream: LogStream::Stdout,
            text: text.into(),
        };
        let lines = || vec![line("aaaa"), line("bb"), line("c"), line("dddddd")];
        let texts = |kept: Vec<LogLine>| kept.into_iter().map(|l| l.text).collect::<Vec<_>>();
        let mut request = LogRequest::new(None, 2);
        assert_eq!(texts(request.newest(lines(), |l| l)), ["c", "dddddd"]);
        request.max_lines = 10;
        request.max_bytes = 9;
        assert_eq!(texts(request.newest(lines(), |l| l)), ["bb", "c", "dddddd"]);
        request.max_bytes = 3;
        assert_eq!(
            texts(request.newest(lines(), |l| l)),
            ["ddd"],
            "a newest line alone is cut"
        );
        assert!(request.newest(Vec::<LogLine>::new(), |l| l).is_empty());
    }

    #[test]
    fn config_lists_are_trimmed_and_default_when_empty() {
        assert_eq!(super::config_list("zones", &["z1"]), ["z1"]);
        super::testing::set_config("zones", " a, ,b ,");
        assert_eq!(super::config_list("zones", &["z1"]), ["a", "b"]);
        super::testing::set_config("zones", " , ");
        assert_eq!(super::config_list("zones", &[]), Vec::<String>::new());
    }
}
