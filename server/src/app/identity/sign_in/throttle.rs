//! What bounds password guessing and the cost of password hashing: rate limits on login
//! attempts, and a cap on argon2 hashes running at once (each takes about 19 MiB and a core for
//! tens of milliseconds).
//!
//! Three limits apply to a login attempt, so that guessing is bounded without letting a guesser
//! lock the account's owner out:
//! - per client address: one address guessing many accounts;
//! - per account and address: one address guessing one account;
//! - per account, counting only addresses the account has not signed in from lately: many
//!   addresses guessing one account. An address the account signed in from in the last
//!   [`KNOWN_ADDRESS_TTL`] (its owner's) is not counted here, so a flood from rotating addresses
//!   cannot keep the owner out; it can still delay a first sign-in from a new address. Which
//!   addresses those are is in the database ([`crate::app::identity::sign_in::addresses`]): every replica,
//!   and a restarted one, knows them.
//!
//! Checks of the current password through a session (a password change) have an account limit
//! of their own. The limits' counters are per server process (GCRA from `governor`); a client over a limit is
//! told when to come back (429 with `Retry-After`). A hash that cannot start within
//! [`HASH_WAIT`] is refused with 503 rather than queued without bound.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::Semaphore;

use crate::error::{AppError, AppResult, ErrorCode};

/// How long a password hash may wait for a free hashing slot.
pub const HASH_WAIT: Duration = Duration::from_secs(5);
/// How long an address an account signed in from stays exempt from the account-wide limit.
pub const KNOWN_ADDRESS_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Login rate limits and the hashing cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimits {
    /// Login attempts per minute from one client address (also the burst).
    pub per_ip_per_minute: u32,
    /// Login attempts per minute for one email from one address, and from all the addresses
    /// it has not signed in from lately together (also the burst).
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
    per_account_and_address: DefaultKeyedRateLimiter<(String, IpAddr)>,
    /// Attempts from addresses not in `known`.
    per_account: DefaultKeyedRateLimiter<String>,
    /// Checks of the current password through a session.
    per_account_in_session: DefaultKeyedRateLimiter<String>,
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
            per_account_and_address: RateLimiter::keyed(per_minute(limits.per_account_per_minute)),
            per_account: RateLimiter::keyed(per_minute(limits.per_account_per_minute)),
            per_account_in_session: RateLimiter::keyed(per_minute(limits.per_account_per_minute)),
            hashes: Arc::new(Semaphore::new(limits.concurrent_hashes.max(1))),
            clock: DefaultClock::default(),
        }
    }

    /// Counts a login attempt from `client` for `email` against the limits of the address and
    /// of the account from that address; refused with 429 and `Retry-After` when one is over.
    pub fn attempt_from(&self, client: IpAddr, email: &str) -> AppResult<()> {
        let refused = self.per_ip.check_key(&client).err().or_else(|| {
            self.per_account_and_address
                .check_key(&(email.to_owned(), client))
                .err()
        });
        self.refused(refused)
    }

    /// Counts a request that writes without credentials (starting a sign-in with an outside
    /// provider) against the limit of its address only: there is no account to guess at.
    pub fn attempt_address(&self, client: IpAddr) -> AppResult<()> {
        let refused = self.per_ip.check_key(&client).err();
        self.refused(refused)
    }

    /// Counts the attempt against the account-wide limit, unless it comes from an address the
    /// account signed in from lately (`known`).
    pub fn attempt_account_wide(&self, email: &str, known: bool) -> AppResult<()> {
        if known {
            return Ok(());
        }
        let refused = self.per_account.check_key(&email.to_owned()).err();
        self.refused(refused)
    }

    /// Counts a password check for `email` that is not a login (the current password of a
    /// password change): guessing through a stolen session is limited like logging in.
    pub fn attempt_account(&self, email: &str) -> AppResult<()> {
        let refused = self
            .per_account_in_session
            .check_key(&email.to_owned())
            .err();
        self.refused(refused)
    }

    fn refused(
        &self,
        refused: Option<governor::NotUntil<<DefaultClock as Clock>::Instant>>,
    ) -> AppResult<()> {
        match refused {
            None => Ok(()),
            Some(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                metrics::counter!("login_throttled_total").increment(1);
                tracing::warn!("password attempts throttled");
                Err(AppError::new(
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
    ) -> AppResult<T> {
        let permit = tokio::time::timeout(HASH_WAIT, self.hashes.clone().acquire_owned())
            .await
            .map_err(|_| {
                metrics::counter!("password_hash_refused_total").increment(1);
                AppError::new(
                    ErrorCode::Busy,
                    "too many password checks are running; retry shortly",
                )
                .retry_after(1)
            })?
            .map_err(AppError::internal)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await
        .map_err(AppError::internal)
    }

    /// Forgets clients and accounts whose limits have fully recovered (run periodically, so
    /// that the tables stay as small as the recent attackers).
    pub fn forget_idle(&self) {
        self.per_ip.retain_recent();
        self.per_account_and_address.retain_recent();
        self.per_account.retain_recent();
        self.per_account_in_session.retain_recent();
        self.per_ip.shrink_to_fit();
        self.per_account_and_address.shrink_to_fit();
        self.per_account.shrink_to_fit();
        self.per_account_in_session.shrink_to_fit();
    }
}
