//! What keeps the deploy pipeline polite to providers: a global limit on provider operations
//! in flight, a global drain rate (operations started per second, set by the operator), a rate
//! per provider (token bucket), a provider's own `rate-limited` answer honoured until its
//! retry-after, capped exponential backoff with full jitter between attempts, and a retry
//! budget per provider: retries never exceed a fraction of first attempts, plus a slow floor
//! (as Finagle's `minRetriesPerSec`) so that a queue of nothing but retries still drains.
//!
//! The decisions that need no clock of their own ([`backoff_delay`], [`RetryBudget`]) are pure
//! and tested apart; [`Throttle`] holds the shared state of one server.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rand::Rng;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The first retry waits up to this long; each further one up to twice as long...
pub const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// ... but never more than this.
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// Retries a provider may have per first attempt.
pub const RETRY_RATIO: f64 = 0.2;
/// Retries a provider may have before any first attempt earned some (so that the first
/// transient failure of a quiet provider is retried).
pub const RETRY_RESERVE: f64 = 2.0;

/// Retries a provider may have a second however few first attempts earn, up to the reserve:
/// without it, retries queued after the first attempts ended (a new leader taking up a dead
/// one's work, a provider back from an outage) would wait for ever.
pub const RETRY_FLOOR_PER_SEC: f64 = 0.5;

/// Full-jitter backoff: a random delay between zero and `min(cap, base × 2^attempt)`.
pub fn backoff_delay(attempt: u32, base: Duration, cap: Duration, rng: &mut impl Rng) -> Duration {
    let ceiling = base
        .checked_mul(1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX))
        .unwrap_or(cap)
        .min(cap);
    ceiling.mul_f64(rng.random::<f64>())
}

/// A retry budget: each first attempt earns `ratio` of a retry, up to `cap` saved; time earns
/// `floor_per_sec` up to the reserve; a retry spends one. So over time retries are at most
/// `ratio` × first attempts plus `floor_per_sec` a second (and the reserve).
#[derive(Debug, Clone)]
pub struct RetryBudget {
    balance: f64,
    ratio: f64,
    cap: f64,
    reserve: f64,
    floor_per_sec: f64,
}

impl RetryBudget {
    pub fn new(ratio: f64, reserve: f64, floor_per_sec: f64) -> Self {
        Self {
            balance: reserve,
            ratio,
            cap: reserve.max(10.0),
            reserve,
            floor_per_sec,
        }
    }

    /// `elapsed` passed since the last refill: the floor's share, up to the reserve.
    pub fn refill(&mut self, elapsed: Duration) {
        if self.balance < self.reserve {
            self.balance =
                (self.balance + elapsed.as_secs_f64() * self.floor_per_sec).min(self.reserve);
        }
    }

    pub fn first_attempt(&mut self) {
        self.balance = (self.balance + self.ratio).min(self.cap);
    }

    /// Spends a retry if the budget has one.
    pub fn retry(&mut self) -> bool {
        if self.balance >= 1.0 {
            self.balance -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Why an operation may not start now, and when to look again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// The provider asked to wait (rate limited) until then.
    ProviderHold(Instant),
    /// The provider's own rate or the global drain rate is spent for now.
    Rate(Duration),
    /// The provider's retry budget is spent: retries wait for first attempts.
    RetryBudget,
}

struct ProviderState {
    rate: DefaultDirectRateLimiter,
    hold_until: Option<Instant>,
    budget: RetryBudget,
    /// When the budget was last given the floor's share.
    refilled_at: Instant,
}

/// The shared limits of one server's provider operations.
pub struct Throttle {
    slots: Arc<Semaphore>,
    limit: usize,
    per_provider_rate: NonZeroU32,
    drain: ArcSwapOption<DefaultDirectRateLimiter>,
    providers: Mutex<HashMap<String, ProviderState>>,
}

impl Throttle {
    /// At most `concurrency` operations in flight; each provider at most
    /// `per_provider_per_sec` started a second.
    pub fn new(concurrency: usize, per_provider_per_sec: u32) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            limit: concurrency.max(1),
            per_provider_rate: NonZeroU32::new(per_provider_per_sec.max(1)).expect("at least 1"),
            drain: ArcSwapOption::empty(),
            providers: Mutex::new(HashMap::new()),
        }
    }

    /// The global limit on operations in flight.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Operations in flight now.
    pub fn in_flight(&self) -> usize {
        self.limit - self.slots.available_permits()
    }

    /// Sets the global drain rate (operations started a second); 0 or less: none.
    pub fn drain_rate_set(&self, per_second: f64) {
        let limiter = (per_second > 0.0).then(|| {
            let period = Duration::from_secs_f64(1.0 / per_second);
            // One operation at a time at the configured pace: a backlog drains evenly.
            Arc::new(RateLimiter::direct(
                Quota::with_period(period)
                    .expect("a positive period")
                    .allow_burst(NonZeroU32::new(1).expect("1")),
            ))
        });
        self.drain.store(limiter);
    }

    /// A slot for one operation, if one is free now.
    pub fn slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// Whether an operation on `provider` (a retry or a first attempt) may start now; if so,
    /// it is counted against the rates and the budget.
    pub fn admit(&self, provider: &str, retry: bool) -> Result<(), Wait> {
        let now = Instant::now();
        let mut providers = self.providers.lock().expect("not poisoned");
        let state = providers
            .entry(provider.to_owned())
            .or_insert_with(|| ProviderState {
                rate: RateLimiter::direct(Quota::per_second(self.per_provider_rate)),
                hold_until: None,
                budget: RetryBudget::new(RETRY_RATIO, RETRY_RESERVE, RETRY_FLOOR_PER_SEC),
                refilled_at: now,
            });
        state
            .budget
            .refill(now.saturating_duration_since(state.refilled_at));
        state.refilled_at = now;
        if let Some(until) = state.hold_until {
            if until > now {
                return Err(Wait::ProviderHold(until));
            }
            state.hold_until = None;
        }
        if retry && state.budget.balance < 1.0 {
            return Err(Wait::RetryBudget);
        }
        if let Err(not_until) = state.rate.check() {
            return Err(Wait::Rate(not_until.wait_time_from(
                governor::clock::Clock::now(&governor::clock::DefaultClock::default()),
            )));
        }
        if let Some(drain) = self.drain.load_full()
            && let Err(not_until) = drain.check()
        {
            return Err(Wait::Rate(not_until.wait_time_from(
                governor::clock::Clock::now(&governor::clock::DefaultClock::default()),
            )));
        }
        if retry {
            state.budget.retry();
        } else {
            state.budget.first_attempt();
        }
        Ok(())
    }

    /// The provider answered `rate-limited`: nothing goes to it before `retry_after` passes.
    pub fn provider_hold(&self, provider: &str, retry_after: Duration) {
        let until = Instant::now() + retry_after;
        let mut providers = self.providers.lock().expect("not poisoned");
        if let Some(state) = providers.get_mut(provider) {
            state.hold_until = Some(state.hold_until.map_or(until, |held| held.max(until)));
        }
    }

    /// Seconds until `provider` may be called again after a `rate-limited` answer, if held.
    pub fn provider_held_for(&self, provider: &str) -> Option<Duration> {
        let providers = self.providers.lock().expect("not poisoned");
        providers
            .get(provider)?
            .hold_until
            .and_then(|until| until.checked_duration_since(Instant::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn backoff_is_full_jitter_under_a_cap() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for attempt in 0..40 {
            let ceiling = (BACKOFF_BASE * 2u32.saturating_pow(attempt.min(20))).min(BACKOFF_CAP);
            for _ in 0..50 {
                let delay = backoff_delay(attempt, BACKOFF_BASE, BACKOFF_CAP, &mut rng);
                assert!(delay <= ceiling, "{attempt}: {delay:?} > {ceiling:?}");
            }
        }
        // Jittered: not all the same.
        let delays: std::collections::BTreeSet<_> = (0..20)
            .map(|_| backoff_delay(5, BACKOFF_BASE, BACKOFF_CAP, &mut rng))
            .collect();
        assert!(delays.len() > 10);
    }

    #[test]
    fn retries_stay_a_fraction_of_first_attempts() {
        let mut budget = RetryBudget::new(0.2, 2.0, 0.0);
        let mut retries = 0;
        for _ in 0..100 {
            budget.first_attempt();
            // A storm: every attempt wants three retries.
            for _ in 0..3 {
                if budget.retry() {
                    retries += 1;
                }
            }
        }
        assert!(
            retries <= 2 + 20,
            "{retries} retries for 100 first attempts"
        );
        assert!(retries >= 20);
    }

    #[test]
    fn retries_alone_still_drain_at_the_floor() {
        let mut budget = RetryBudget::new(0.2, 2.0, 0.5);
        assert!(budget.retry() && budget.retry());
        assert!(!budget.retry(), "the reserve is spent");
        budget.refill(Duration::from_secs(1));
        assert!(!budget.retry(), "half a retry earned");
        budget.refill(Duration::from_secs(1));
        assert!(budget.retry(), "one earned in two seconds");
        // Idle for long: no more than the reserve saved up.
        budget.refill(Duration::from_secs(3600));
        assert!(budget.retry() && budget.retry());
        assert!(!budget.retry());
    }

    #[test]
    fn a_held_provider_and_a_spent_budget_wait() {
        let throttle = Throttle::new(2, 1000);
        assert!(throttle.admit("gcp", false).is_ok());
        throttle.provider_hold("gcp", Duration::from_secs(7));
        assert!(matches!(
            throttle.admit("gcp", false),
            Err(Wait::ProviderHold(_))
        ));
        assert!(throttle.provider_held_for("gcp").unwrap() > Duration::from_secs(6));
        assert!(throttle.admit("aws", false).is_ok());
        // aws: the reserve of 2 retries plus 0.2 earned, then nothing until more first attempts.
        assert!(throttle.admit("aws", true).is_ok());
        assert!(throttle.admit("aws", true).is_ok());
        assert_eq!(throttle.admit("aws", true), Err(Wait::RetryBudget));
        let a = throttle.slot().unwrap();
        let _b = throttle.slot().unwrap();
        assert!(throttle.slot().is_none());
        assert_eq!(throttle.in_flight(), 2);
        drop(a);
        assert!(throttle.slot().is_some());
    }

    #[test]
    fn the_drain_rate_paces_starts() {
        let throttle = Throttle::new(8, 1000);
        throttle.drain_rate_set(5.0);
        assert!(throttle.admit("metal", false).is_ok());
        match throttle.admit("metal", false) {
            Err(Wait::Rate(wait)) => assert!(wait <= Duration::from_millis(200)),
            other => panic!("{other:?}"),
        }
        throttle.drain_rate_set(0.0);
        assert!(throttle.admit("metal", false).is_ok());
    }
}
