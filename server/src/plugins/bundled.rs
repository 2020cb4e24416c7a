//! The plugins bundled with the server: the binary hands their bytes to the server at start-up
//! ([`BundledPlugins`], from the `bulkhead-bundled-plugins` crate), so that a fresh server has
//! working providers with no other setup. At start-up each becomes the provider of its name
//! unless one is configured already. The settings each provider starts with are here.

/// A bundled plugin and the settings its provider starts with.
pub struct Bundled {
    pub provider: &'static str,
    pub wasm: &'static [u8],
    pub config: &'static [(&'static str, &'static str)],
    pub allowlist: &'static [&'static str],
}

/// The plugins a binary bundles: each provider's name and its plugin's bytes.
#[derive(Clone, Copy, Default)]
pub struct BundledPlugins(pub &'static [(&'static str, &'static [u8])]);

impl std::fmt::Debug for BundledPlugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(name, wasm)| (name, wasm.len())))
            .finish()
    }
}

/// A provider's first settings.
struct FirstSettings {
    provider: &'static str,
    config: &'static [(&'static str, &'static str)],
    allowlist: &'static [&'static str],
}

/// Each provider's first settings: the configuration and allowlist of the real service;
/// credentials are secrets an operator sets (until then its calls fail as unauthorized).
const FIRST_SETTINGS: &[FirstSettings] = &[
    FirstSettings {
        provider: "example",
        config: &[("regions", "local")],
        allowlist: &[],
    },
    FirstSettings {
        provider: "aws",
        config: &[("regions", "us-east-1")],
        // The EC2 and CloudWatch Logs endpoints of each configured region, nothing else of
        // AWS; an operator who adds a region adds its endpoints too.
        allowlist: &[
            "ec2.us-east-1.amazonaws.com:443",
            "logs.us-east-1.amazonaws.com:443",
        ],
    },
    FirstSettings {
        provider: "gcp",
        config: &[("regions", "us-central1-a")],
        allowlist: &[
            "compute.googleapis.com:443",
            "oauth2.googleapis.com:443",
            "logging.googleapis.com:443",
        ],
    },
    FirstSettings {
        provider: "metal",
        config: &[("regions", "local"), ("agents", "")],
        allowlist: &[],
    },
];

impl BundledPlugins {
    /// Each bundled plugin with its provider's first settings (none for a provider this
    /// server does not know).
    pub fn each(self) -> impl Iterator<Item = Bundled> {
        self.0.iter().map(|(provider, wasm)| {
            let first = FIRST_SETTINGS
                .iter()
                .find(|first| first.provider == *provider);
            Bundled {
                provider,
                wasm,
                config: first.map_or(&[], |first| first.config),
                allowlist: first.map_or(&[], |first| first.allowlist),
            }
        })
    }
}
