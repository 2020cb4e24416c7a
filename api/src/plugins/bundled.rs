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

/// Each starts with the configuration and allowlist of the real service; credentials are
/// secrets an operator sets (until then its calls fail as unauthorized).
pub const BUNDLED: &[Bundled] = &[
    Bundled {
        provider: "example",
        wasm: plugin_wasm!("bulkhead_plugin_example.wasm"),
        config: &[("regions", "local")],
        allowlist: &[],
    },
    Bundled {
        provider: "aws",
        wasm: plugin_wasm!("bulkhead_plugin_aws.wasm"),
        config: &[("regions", "us-east-1")],
        // The EC2 endpoint of each configured region, nothing else of AWS; an operator who
        // adds a region adds its endpoint too.
        allowlist: &["ec2.us-east-1.amazonaws.com:443"],
    },
    Bundled {
        provider: "gcp",
        wasm: plugin_wasm!("bulkhead_plugin_gcp.wasm"),
        config: &[("regions", "us-central1-a")],
        allowlist: &["compute.googleapis.com:443", "oauth2.googleapis.com:443"],
    },
    Bundled {
        provider: "metal",
        wasm: plugin_wasm!("bulkhead_plugin_metal.wasm"),
        config: &[("regions", "local"), ("agents", "")],
        allowlist: &[],
    },
];
