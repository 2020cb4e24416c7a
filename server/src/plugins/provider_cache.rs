//! The cache a provider's plugin keeps between calls (`host.cache-get`/`cache-set` of contract
//! 0.3.0), e.g. an access token that would otherwise be fetched on every call.
//!
//! One cache per provider's settings: it lives in the provider's [`super::PluginEnv`], which
//! is replaced as a whole when the provider's configuration, secrets, limits or plugin version
//! change, so a changed credential never meets a token made with the old one, and no other
//! provider can reach it. It is bounded in entries and bytes; when full, expired entries go
//! first, then those closest to expiring. Values are whatever the plugin stored (they may be
//! credentials): never logged, never shown.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries one provider may keep.
pub const CACHE_MAX_ENTRIES: usize = 256;
/// Bytes (keys and values) one provider may keep.
pub const CACHE_MAX_BYTES: usize = 1024 * 1024;
/// Largest key.
pub const CACHE_MAX_KEY_BYTES: usize = 256;
/// Largest value.
pub const CACHE_MAX_VALUE_BYTES: usize = 64 * 1024;
/// Longest time to live.
pub const CACHE_MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Default)]
pub struct ProviderCache {
    inner: Mutex<Entries>,
}

impl std::fmt::Debug for ProviderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.inner.lock().expect("not poisoned");
        f.debug_struct("ProviderCache")
            .field("entries", &entries.map.len())
            .field("bytes", &entries.bytes)
            .finish()
    }
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    /// Keys and values, added up.
    bytes: usize,
}

struct Entry {
    value: Vec<u8>,
    expires: Instant,
}

impl Entries {
    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.map.remove(key) {
            self.bytes -= key.len() + entry.value.len();
        }
    }

    /// Frees room for one more entry of `size` bytes: expired entries first, then the
    /// entries that expire soonest.
    fn make_room(&mut self, size: usize, now: Instant) {
        let fits = |entries: &Self| {
            entries.map.len() < CACHE_MAX_ENTRIES && entries.bytes + size <= CACHE_MAX_BYTES
        };
        if fits(self) {
            return;
        }
        let expired: Vec<String> = self
            .map
            .iter()
            .filter(|(_, entry)| entry.expires <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in expired {
            self.remove(&key);
        }
        while !fits(self) {
            let Some(soonest) = self
                .map
                .iter()
                .min_by_key(|(_, entry)| entry.expires)
                .map(|(key, _)| key.clone())
            else {
                return;
            };
            self.remove(&soonest);
        }
    }
}

impl ProviderCache {
    /// The value of `key`, unless it expired (then it is dropped).
    pub fn get(&self, key: &str, now: Instant) -> Option<Vec<u8>> {
        let mut entries = self.inner.lock().expect("not poisoned");
        match entries.map.get(key) {
            Some(entry) if entry.expires > now => Some(entry.value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` under `key` until `now + ttl` (capped at [`CACHE_MAX_TTL`]); a TTL of 0
    /// removes the key.
    pub fn set(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Duration,
        now: Instant,
    ) -> Result<(), String> {
        if key.is_empty() || key.len() > CACHE_MAX_KEY_BYTES {
            return Err(format!("cache keys are 1 to {CACHE_MAX_KEY_BYTES} bytes"));
        }
        if value.len() > CACHE_MAX_VALUE_BYTES {
            return Err(format!(
                "a cached value may be at most {CACHE_MAX_VALUE_BYTES} bytes (this one is {})",
                value.len()
            ));
        }
        let mut entries = self.inner.lock().expect("not poisoned");
        entries.remove(key);
        if ttl.is_zero() {
            return Ok(());
        }
        let size = key.len() + value.len();
        entries.make_room(size, now);
        entries.bytes += size;
        entries.map.insert(
            key.to_owned(),
            Entry {
                value,
                expires: now + ttl.min(CACHE_MAX_TTL),
            },
        );
        Ok(())
    }

    /// Entries and bytes held now.
    pub fn usage(&self) -> (usize, usize) {
        let entries = self.inner.lock().expect("not poisoned");
        (entries.map.len(), entries.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn values_expire_after_their_ttl() {
        let cache = ProviderCache::default();
        let now = Instant::now();
        cache.set("token", b"abc".to_vec(), MINUTE, now).unwrap();
        assert_eq!(cache.get("token", now + MINUTE / 2), Some(b"abc".to_vec()));
        assert_eq!(cache.get("token", now + MINUTE), None);
        assert_eq!(
            cache.usage(),
            (0, 0),
            "an expired value is dropped when met"
        );
        cache.set("token", b"abc".to_vec(), MINUTE, now).unwrap();
        cache
            .set("token", b"abc".to_vec(), Duration::ZERO, now)
            .unwrap();
        assert_eq!(cache.get("token", now), None, "a zero TTL removes");
        cache
            .set("long", b"x".to_vec(), CACHE_MAX_TTL * 10, now)
            .unwrap();
        assert_eq!(
            cache.get("long", now + CACHE_MAX_TTL),
            None,
            "TTLs are capped"
        );
    }

    #[test]
    fn it_is_bounded_in_entries_and_bytes() {
        let cache = ProviderCache::default();
        let now = Instant::now();
        for n in 0..CACHE_MAX_ENTRIES + 10 {
            // Later keys expire later: the earliest are evicted first.
            let ttl = MINUTE + Duration::from_secs(n as u64);
            cache.set(&format!("k{n}"), vec![1], ttl, now).unwrap();
        }
        assert_eq!(cache.usage().0, CACHE_MAX_ENTRIES);
        assert_eq!(cache.get("k0", now), None);
        assert!(
            cache
                .get(&format!("k{}", CACHE_MAX_ENTRIES + 9), now)
                .is_some()
        );

        let big = vec![0u8; CACHE_MAX_VALUE_BYTES];
        for n in 0..40 {
            cache
                .set(&format!("big{n}"), big.clone(), MINUTE * 2, now)
                .unwrap();
        }
        let (_, bytes) = cache.usage();
        assert!(bytes <= CACHE_MAX_BYTES, "{bytes}");
        assert!(cache.get("big39", now).is_some());

        let too_big = cache.set("huge", vec![0; CACHE_MAX_VALUE_BYTES + 1], MINUTE, now);
        assert!(too_big.is_err_and(|why| why.contains("at most")));
        assert!(cache.set("", vec![], MINUTE, now).is_err());
        assert!(cache.set(&"k".repeat(300), vec![], MINUTE, now).is_err());
    }
}
