//! The plugins bundled with the server: built from `plugins/` by the build script and
//! embedded in the binary, so that a fresh server has working providers with no other setup.
//! At start-up each becomes the provider of its name unless one is configured already.

/// A bundled plugin and the settings its provider starts with.
pub struct Bundled {
    pub provider: &'static str,
    pub wasm: &'static [u8],
    pub config: &'static [(&'static str, &'static str)],
    pub allowlist: &'static [&'static str],
}

macro_rules! plugin_wasm {
    ($file:literal) => {
        include_bytes!(concat!(env!("BULKHEAD_PLUGINS_DIR"), "/", $file))
    };
}

pub const BUNDLED: &[Bundled] = &[Bundled {
    provider: "example",
    wasm: plugin_wasm!("bulkhead_plugin_example.wasm"),
    config: &[("regions", "local")],
    allowlist: &[],
}];
