//! The provider's cache, kept by Bulkhead between calls (contract 0.3.0).
//!
//! A plugin runs in a fresh instance for every call; what is worth keeping between calls (an
//! access token, a resolved endpoint) goes here. The cache belongs to the provider: its other
//! calls see it, other providers never do, and Bulkhead empties it when the provider's
//! configuration, secrets or plugin version change. It is bounded (256 entries, 1 MiB, values of
//! at most 64 KiB, a day at most), so a value may be gone early: always be able to make it
//! again.
//!
//! ```
//! use std::time::Duration;
//!
//! fn token() -> String {
//!     if let Some(token) = bulkhead_sdk::cache::get_string("token") {
//!         return token;
//!     }
//!     let token = "fetched-from-the-api".to_owned(); // e.g. an OAuth exchange
//!     // Not fatal if refused: the next call fetches again.
//!     let _ = bulkhead_sdk::cache::set("token", token.as_bytes(), Duration::from_secs(3000));
//!     token
//! }
//! # assert_eq!(token(), "fetched-from-the-api");
//! # assert_eq!(bulkhead_sdk::cache::get_string("token").as_deref(), Some("fetched-from-the-api"));
//! ```
//!
//! On a native target (unit tests) it is a per-thread map; [`crate::testing::cache_clear`]
//! empties it.

use std::time::Duration;

/// The value stored under `key`, if it is still there.
pub fn get(key: &str) -> Option<Vec<u8>> {
    #[cfg(target_family = "wasm")]
    return crate::bindings::bulkhead::provider::host::cache_get(key);
    #[cfg(not(target_family = "wasm"))]
    return crate::testing::cache_get(key);
}

/// The value stored under `key` as text, if it is still there and is UTF-8.
pub fn get_string(key: &str) -> Option<String> {
    get(key).and_then(|bytes| String::from_utf8(bytes).ok())
}

/// Stores `value` under `key` for `ttl` (whole seconds, at most a day; zero removes it). Fails,
/// saying why, when the key or the value is larger than Bulkhead accepts.
pub fn set(key: &str, value: &[u8], ttl: Duration) -> Result<(), String> {
    let ttl_secs = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
    #[cfg(target_family = "wasm")]
    return crate::bindings::bulkhead::provider::host::cache_set(key, value, ttl_secs);
    #[cfg(not(target_family = "wasm"))]
    return crate::testing::cache_set(key, value, ttl_secs);
}
