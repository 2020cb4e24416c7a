//! The provider plugins the `bulkhead` binary bundles, built from `plugins/` for
//! `wasm32-wasip2` by this crate's build script, as bytes ([`WASM`]), and the directory they
//! were built in ([`PLUGINS_DIR`], where the tests find the other plugins they load).
//!
//! A crate of its own, used by the binary and the tests only: the server library compiles while
//! the plugins build, instead of after (the library is given the plugins at start-up,
//! `bulkhead::config::Settings::bundled_plugins`).

/// Where the plugins of `plugins/` were built.
pub const PLUGINS_DIR: &str = env!("BULKHEAD_PLUGINS_DIR");

macro_rules! plugin_wasm {
    ($file:literal) => {
        include_bytes!(concat!(env!("BULKHEAD_PLUGINS_DIR"), "/", $file))
    };
}

/// Each bundled provider's name and its plugin: the real providers only. `example`, a demo
/// whose instances nothing serves, is no server's provider: it would take real placements
/// (a service placed anywhere put replicas on it, which never turned healthy).
pub const WASM: &[(&str, &[u8])] = &[
    ("aws", plugin_wasm!("bulkhead_plugin_aws.wasm")),
    ("gcp", plugin_wasm!("bulkhead_plugin_gcp.wasm")),
    ("metal", plugin_wasm!("bulkhead_plugin_metal.wasm")),
];

/// The demo `example` provider, which the tests' servers bundle beside [`WASM`].
pub const EXAMPLE: (&str, &[u8]) = ("example", plugin_wasm!("bulkhead_plugin_example.wasm"));
