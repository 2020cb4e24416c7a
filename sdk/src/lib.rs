//! The SDK for Bulkhead provider plugins.
//!
//! A plugin is a type that implements [`Provider`], exported with [`export_provider!`]:
//!
//! ```ignore
//! use bulkhead_sdk::{Provider, ProviderInfo, HealthReport, HealthStatus, InstanceSpec, Instance, ProviderError};
//!
//! struct Example;
//!
//! impl Provider for Example {
//!     fn info() -> ProviderInfo { /* name, version, regions, capabilities */ }
//!     fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> { /* ... */ }
//!     // health, deprovision, describe and list have their own methods too.
//! }
//!
//! bulkhead_sdk::export_provider!(Example);
//! ```
//!
//! `cargo build --release --target wasm32-wasip2` then yields the component. The generated
//! bindings stay inside this crate: plugins use the re-exported types, [`config`], [`secret`]
//! and the logging macros. On a native target (unit tests), configuration, secrets and logs go
//! to the in-memory [`testing`] host instead of the Bulkhead host, so that plugin logic can be
//! tested with `cargo test` and no Wasm build.

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

pub mod http;

use std::marker::PhantomData;

pub use bindings::bulkhead::provider::host::LogLevel;
pub use bindings::bulkhead::provider::types::{
    HealthReport, HealthStatus, Instance, InstanceSpec, InstanceState, ProviderError, ProviderInfo,
    RateLimit,
};

/// The version of the `bulkhead:provider` contract this SDK builds plugins for.
pub const CONTRACT_VERSION: &str = "0.2.0";

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

    use super::LogLevel;
    use crate::http::{HttpError, Request, Response};

    type HttpHandler = Box<dyn FnMut(&Request) -> Result<Response, HttpError>>;

    thread_local! {
        static HTTP: RefCell<Option<HttpHandler>> = const { RefCell::new(None) };
        static CONFIG: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
        static SECRETS: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
        static LOGS: RefCell<Vec<(LogLevel, String)>> = const { RefCell::new(Vec::new()) };
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
    #[test]
    fn config_lists_are_trimmed_and_default_when_empty() {
        assert_eq!(super::config_list("zones", &["z1"]), ["z1"]);
        super::testing::set_config("zones", " a, ,b ,");
        assert_eq!(super::config_list("zones", &["z1"]), ["a", "b"]);
        super::testing::set_config("zones", " , ");
        assert_eq!(super::config_list("zones", &[]), Vec::<String>::new());
    }
}
