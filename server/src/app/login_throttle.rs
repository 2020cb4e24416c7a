//! What bounds password guessing and the cost of password hashing: a rate limit per client
//! address and one per account (email) on login attempts, and a cap on argon2 hashes running
//! at once (each takes about 19 MiB and a core for tens of milliseconds).
//!
//! Limits are per server process (GCRA from `governor`); a client over a limit is told when to
//! come back (429 with `Retry-After`). A hash that cannot start within [`HASH_WAIT`] is refused
//! with 503 rather than queued without bound.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::StatusCode;
use tokio::sync::Semaphore;

use crate::error::{ApiError, ApiResult, ErrorCode};

/// How long a password hash may wait for a free hashing slot.
pub const HASH_WAIT: Duration = Duration::from_secs(5);

/// Login rate limits and the hashing cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimits {
    /// Login attempts per minute from one client address (also the burst).
    pub per_ip_per_minute: u32,
    /// Login attempts per minute for one email, from anywhere (also the burst).
    pub per_account_per_minute: u32,
    /// Password hashes (logins, password changes, new users) computed at once.
    pub concurrent_hashes: usize,
}

impl Default for LoginLimits {
    fn default() -> Self {
        Self {
            per_ip_per_minute: 30,
            per_account_per_minute: 10,
            concurrent_hashes: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .max(2),
        }
    }
}

pub struct LoginThrottle {
    per_ip: DefaultKeyedRateLimiter<IpAddr>,
    per_account: DefaultKeyedRateLimiter<String>,
    hashes: Arc<Semaphore>,
    clock: DefaultClock,
}

fn per_minute(n: u32) -> Quota {
    Quota::per_minute(NonZeroU32::new(n.max(1)).expect("at least 1"))
}

impl LoginThrottle {
    pub fn new(limits: LoginLimits) -> Self {
        Self {
            per_ip: RateLimiter::keyed(per_minute(limits.per_ip_per_minute)),
            per_account: RateLimiter::keyed(per_minute(limits.per_account_per_minute)),
            hashes: Arc::new(Semaphore::new(limits.concurrent_hashes.max(1))),
            clock: DefaultClock::default(),
        }
    }

    /// Counts a login attempt from `client` for `email`; refused with 429 and `Retry-After`
    /// when either is over its limit.
    pub fn attempt(&self, client: IpAddr, email: &str) -> ApiResult<()> {
        let refused = self
            .per_ip
            .check_key(&client)
            .err()
            .or_else(|| self.per_account.check_key(&email.to_owned()).err());
        self.refused(refused)
    }

    /// Counts a password check for `email` that is not a login (the current password of a
    /// password change): guessing through a stolen session is limited like logging in.
    pub fn attempt_account(&self, email: &str) -> ApiResult<()> {
        let refused = self.per_account.check_key(&email.to_owned()).err();
        self.refused(refused)
    }

    fn refused(
        &self,
        refused: Option<governor::NotUntil<<DefaultClock as Clock>::Instant>>,
    ) -> ApiResult<()> {
        match refused {
            None => Ok(()),
            Some(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                metrics::counter!("login_throttled_total").increment(1);
                tracing::warn!("password attempts throttled");
                Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorCode::TooManyAttempts,
                    "too many login attempts; wait before trying again",
                )
                .retry_after(wait.as_secs().max(1)))
            }
        }
    }

    /// Runs `work` (a password hash or verification) on the blocking pool once a hashing slot
    /// is free.
    pub async fn hash<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> ApiResult<T> {
        let permit = tokio::time::timeout(HASH_WAIT, self.hashes.clone().acquire_owned())
            .await
            .map_err(|_| {
                metrics::counter!("password_hash_refused_total").increment(1);
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::Busy,
                    "too many password checks are running; retry shortly",
                )
                .retry_after(1)
            })?
            .map_err(ApiError::internal)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await
        .map_err(ApiError::internal)
    }

    /// Forgets clients and accounts whose limits have fully recovered (run periodically, so
    /// that the tables stay as small as the recent attackers).
    pub fn forget_idle(&self) {
        self.per_ip.retain_recent();
        self.per_account.retain_recent();
        self.per_ip.shrink_to_fit();
        self.per_account.shrink_to_fit();
    }
}
