//! The providers' running plugins: for each provider, the plugin version that new calls use,
//! swapped atomically.
//!
//! A call takes the provider's current [`ActivePlugin`] (an `Arc`) and keeps it until it ends,
//! so a swap never drops or disturbs a call in flight: calls that started on the old version
//! finish on it, calls that start after the swap use the new one, and the old version is
//! freed when its last call ends. What is active, and why, is decided and stored by the
//! application (`app::providers`); this module only holds it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwapOption;

use super::{CallStats, Plugin, PluginEnv, PluginHost, ProviderInfo};

/// The plugin a provider runs now, with the settings its calls see.
pub struct ActivePlugin {
    pub plugin: Arc<Plugin>,
    pub env: Arc<PluginEnv>,
    /// The plugin's `info` with these settings, asked once when first needed.
    pub info: tokio::sync::OnceCell<ProviderInfo>,
}

/// One provider's place in the registry.
pub struct ProviderSlot {
    active: ArcSwapOption<ActivePlugin>,
    /// The revision of the provider's row that what is active here was made from (0: none
    /// yet): a replica whose revision is behind the database's loads the provider again.
    revision: AtomicI64,
    /// The last revision this replica failed to load (0: none): a call does not try it again,
    /// the periodic sync does.
    pub failed_revision: AtomicI64,
    /// Calls of every version of this provider since the server started, by outcome.
    pub stats: Arc<CallStats>,
    /// Held while the provider's plugin or settings change, so that two changes of one
    /// provider never interleave.
    pub changing: tokio::sync::Mutex<()>,
}

impl Default for ProviderSlot {
    fn default() -> Self {
        Self {
            active: ArcSwapOption::empty(),
            revision: AtomicI64::new(0),
            failed_revision: AtomicI64::new(0),
            stats: Arc::default(),
            changing: tokio::sync::Mutex::new(()),
        }
    }
}

impl ProviderSlot {
    /// The revision of the provider's row that this slot serves.
    pub fn revision(&self) -> i64 {
        self.revision.load(Ordering::Acquire)
    }

    /// The version new calls use, if the provider is enabled and has one.
    pub fn active(&self) -> Option<Arc<ActivePlugin>> {
        self.active.load_full()
    }

    /// Makes `plugin` (counted in this slot's stats), made from `revision` of the provider,
    /// the version new calls use.
    pub fn activate(&self, mut plugin: Plugin, env: Arc<PluginEnv>, revision: i64) {
        plugin.stats = self.stats.clone();
        self.active.store(Some(Arc::new(ActivePlugin {
            plugin: Arc::new(plugin),
            env,
            info: tokio::sync::OnceCell::new(),
        })));
        self.revision.store(revision, Ordering::Release);
    }

    /// Takes the provider out of service (as `revision` of it says): new calls find no
    /// plugin.
    pub fn deactivate(&self, revision: i64) {
        self.active.store(None);
        self.revision.store(revision, Ordering::Release);
    }
}

/// The plugin host and every provider's slot.
pub struct ProviderRegistry {
    pub host: PluginHost,
    slots: RwLock<HashMap<String, Arc<ProviderSlot>>>,
}

impl ProviderRegistry {
    pub fn new(host: PluginHost) -> Self {
        Self {
            host,
            slots: RwLock::default(),
        }
    }

    /// The slot of `provider`, made empty on first use.
    pub fn slot(&self, provider: &str) -> Arc<ProviderSlot> {
        if let Some(slot) = self.slots.read().expect("not poisoned").get(provider) {
            return slot.clone();
        }
        self.slots
            .write()
            .expect("not poisoned")
            .entry(provider.to_owned())
            .or_default()
            .clone()
    }

    /// Every provider taking calls, with the version new calls use.
    pub fn serving(&self) -> Vec<(String, Arc<ActivePlugin>)> {
        self.slots
            .read()
            .expect("not poisoned")
            .iter()
            .filter_map(|(name, slot)| Some((name.clone(), slot.active()?)))
            .collect()
    }

    /// The version of `provider` that new calls use.
    pub fn active(&self, provider: &str) -> Option<Arc<ActivePlugin>> {
        self.slots
            .read()
            .expect("not poisoned")
            .get(provider)
            .and_then(|slot| slot.active())
    }
}
