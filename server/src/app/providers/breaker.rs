//! A provider's circuit breaker: how the outcomes of plugin calls and health probes move a
//! provider between healthy, degraded and unavailable. Pure logic over an explicit clock, so
//! that it is tested without waiting; `app::providers::health` feeds it and records its changes.
//!
//! - Closed (healthy, or degraded when the last probe said so): calls go through.
//!   Authorization and suspension errors open it at once; timeouts and transient errors
//!   open it once `failure_threshold` of them come in a row.
//! - Open (unavailable): calls are refused without reaching the plugin; probes run with
//!   capped exponential backoff and jitter.
//! - Half-open (shown as degraded): a probe succeeded; calls go through again, the next
//!   success closes it and a failure opens it again (with the backoff continuing to grow).
//!
//! Errors that are the caller's (not found, invalid spec, quota) say nothing about the
//! provider's health and leave the breaker as it is.

use std::time::{Duration, Instant};

pub use crate::entity::provider::ProviderHealth;

/// What a call or probe says about the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// It answered normally.
    Success,
    /// A probe answered `degraded`.
    Degraded(String),
    /// Unauthorized or suspended: open at once.
    Fatal(String),
    /// A timeout, a crash, rate limiting or a transient error.
    Transient(String),
    /// The caller's error: says nothing about the provider.
    Neutral,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    Open,
    HalfOpen,
}

#[derive(Debug, Clone)]
pub struct BreakerConfig {
    /// Transient failures in a row that open the breaker.
    pub failure_threshold: u32,
    /// Time between probes of a closed breaker.
    pub probe_interval: Duration,
    /// First wait before probing an open breaker; doubles up to `backoff_cap`.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
}

impl BreakerConfig {
    /// Probes every `probe_interval`; an open breaker is probed after half of it at first,
    /// backing off up to six times it.
    pub fn for_interval(probe_interval: Duration) -> Self {
        Self {
            failure_threshold: 3,
            probe_interval,
            backoff_base: (probe_interval / 2).max(Duration::from_millis(100)),
            backoff_cap: probe_interval * 6,
        }
    }
}

/// A change of health, to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub from: ProviderHealth,
    pub to: ProviderHealth,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    phase: Phase,
    degraded: bool,
    failures: u32,
    backoff: Duration,
    next_probe: Instant,
}

impl Breaker {
    /// A breaker starting at `health` (as stored), with its first probe due now.
    pub fn new(config: BreakerConfig, health: ProviderHealth, now: Instant) -> Self {
        let backoff = config.backoff_base;
        Self {
            phase: if health == ProviderHealth::Unavailable {
                Phase::Open
            } else {
                Phase::Closed
            },
            degraded: health == ProviderHealth::Degraded,
            failures: 0,
            backoff,
            next_probe: now,
            config,
        }
    }

    pub fn health(&self) -> ProviderHealth {
        match self.phase {
            Phase::Open => ProviderHealth::Unavailable,
            Phase::HalfOpen => ProviderHealth::Degraded,
            Phase::Closed if self.degraded => ProviderHealth::Degraded,
            Phase::Closed => ProviderHealth::Healthy,
        }
    }

    /// Whether a call may go to the plugin now.
    pub fn allows_calls(&self) -> bool {
        self.phase != Phase::Open
    }

    /// Whether a probe is due.
    pub fn probe_due(&self, now: Instant) -> bool {
        now >= self.next_probe
    }

    /// Makes a probe due now (the provider's plugin or settings changed).
    pub fn probe_now(&mut self, now: Instant) {
        self.next_probe = now;
    }

    /// When an open breaker will be probed next.
    pub fn retry_after(&self, now: Instant) -> Duration {
        self.next_probe.saturating_duration_since(now)
    }

    /// Takes in what a call (`probe: false`) or a probe said. `jitter` in `0.0..1.0` spreads
    /// the probes of an open breaker (up to +25% of the backoff).
    pub fn record(
        &mut self,
        signal: Signal,
        probe: bool,
        now: Instant,
        jitter: f64,
    ) -> Option<Change> {
        // While open, only probes count: a call that began before it opened says nothing new.
        if self.phase == Phase::Open && !probe {
            return None;
        }
        let before = self.health();
        let reason = match signal {
            Signal::Neutral => return None,
            Signal::Success | Signal::Degraded(_) => {
                let degraded = matches!(signal, Signal::Degraded(_));
                self.failures = 0;
                match self.phase {
                    Phase::Open => {
                        self.phase = Phase::HalfOpen;
                        self.degraded = degraded;
                    }
                    Phase::HalfOpen | Phase::Closed => {
                        self.phase = Phase::Closed;
                        self.backoff = self.config.backoff_base;
                        if probe {
                            self.degraded = degraded;
                        }
                    }
                }
                match signal {
                    Signal::Degraded(message) => {
                        format!("the provider reports degraded: {message}")
                    }
                    _ if self.phase == Phase::HalfOpen => "a probe succeeded".to_owned(),
                    _ => "calls succeed".to_owned(),
                }
            }
            Signal::Fatal(message) => {
                self.open(now, jitter);
                message
            }
            Signal::Transient(message) => {
                self.failures += 1;
                if self.phase != Phase::Closed || self.failures >= self.config.failure_threshold {
                    self.open(now, jitter);
                }
                message
            }
        };
        if probe && self.phase != Phase::Open {
            self.next_probe = now + self.config.probe_interval;
        }
        let after = self.health();
        (after != before).then_some(Change {
            from: before,
            to: after,
            reason,
        })
    }

    /// Takes `health` as recorded by another replica: open there, open here (probed after the
    /// current backoff); closed there, closed here.
    pub fn adopt(&mut self, health: ProviderHealth, now: Instant) {
        if health == self.health() {
            return;
        }
        self.failures = 0;
        match health {
            ProviderHealth::Unavailable => {
                self.phase = Phase::Open;
                self.next_probe = now + self.backoff;
            }
            ProviderHealth::Degraded if self.phase == Phase::Open => {
                self.phase = Phase::HalfOpen;
            }
            ProviderHealth::Degraded => {
                self.phase = Phase::Closed;
                self.degraded = true;
            }
            ProviderHealth::Healthy => {
                self.phase = Phase::Closed;
                self.degraded = false;
                self.backoff = self.config.backoff_base;
            }
        }
    }

    fn open(&mut self, now: Instant, jitter: f64) {
        self.backoff = match self.phase {
            Phase::Closed => self.config.backoff_base,
            Phase::Open | Phase::HalfOpen => (self.backoff * 2).min(self.config.backoff_cap),
        };
        self.phase = Phase::Open;
        self.failures = 0;
        self.next_probe = now + self.backoff.mul_f64(1.0 + jitter.clamp(0.0, 1.0) / 4.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(now: Instant) -> Breaker {
        Breaker::new(
            BreakerConfig::for_interval(Duration::from_secs(10)),
            ProviderHealth::Healthy,
            now,
        )
    }

    #[test]
    fn suspension_opens_at_once_and_recovery_closes_through_half_open() {
        let t0 = Instant::now();
        let mut b = breaker(t0);
        let change = b.record(Signal::Fatal("account suspended".into()), false, t0, 0.0);
        assert_eq!(change.unwrap().to, ProviderHealth::Unavailable);
        assert!(!b.allows_calls());
        assert_eq!(b.retry_after(t0), Duration::from_secs(5));
        assert!(!b.probe_due(t0 + Duration::from_secs(4)));
        assert!(b.probe_due(t0 + Duration::from_secs(5)));

        let t1 = t0 + Duration::from_secs(5);
        let change = b.record(Signal::Success, true, t1, 0.0).unwrap();
        assert_eq!(
            (change.from, change.to),
            (ProviderHealth::Unavailable, ProviderHealth::Degraded)
        );
        assert!(b.allows_calls());
        let change = b.record(Signal::Success, false, t1, 0.0).unwrap();
        assert_eq!(change.to, ProviderHealth::Healthy);
    }

    #[test]
    fn transient_errors_open_past_the_threshold_and_backoff_is_capped() {
        let t0 = Instant::now();
        let mut b = breaker(t0);
        assert!(
            b.record(Signal::Transient("timeout".into()), false, t0, 0.0)
                .is_none()
        );
        assert!(
            b.record(Signal::Success, false, t0, 0.0).is_none(),
            "a success resets the count"
        );
        for _ in 0..2 {
            assert!(
                b.record(Signal::Transient("503".into()), false, t0, 0.0)
                    .is_none()
            );
        }
        assert_eq!(
            b.record(Signal::Transient("503".into()), false, t0, 0.0)
                .unwrap()
                .to,
            ProviderHealth::Unavailable
        );
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..6 {
            waits.push(b.retry_after(now).as_secs());
            now += b.retry_after(now);
            b.record(Signal::Transient("still down".into()), true, now, 0.0);
        }
        assert_eq!(waits, [5, 10, 20, 40, 60, 60]);
        // A failing half-open trial opens it again with a longer wait.
        b.record(Signal::Success, true, now, 0.0);
        b.record(Signal::Transient("flaky".into()), false, now, 0.0);
        assert!(!b.allows_calls());
        assert_eq!(b.retry_after(now), Duration::from_secs(60));
    }

    #[test]
    fn caller_errors_and_calls_while_open_change_nothing() {
        let t0 = Instant::now();
        let mut b = breaker(t0);
        for _ in 0..10 {
            assert!(b.record(Signal::Neutral, false, t0, 0.0).is_none());
        }
        assert_eq!(b.health(), ProviderHealth::Healthy);
        b.record(Signal::Fatal("unauthorized".into()), false, t0, 0.0);
        assert!(
            b.record(Signal::Success, false, t0, 0.0).is_none(),
            "only a probe half-opens"
        );
        assert_eq!(b.health(), ProviderHealth::Unavailable);
    }

    #[test]
    fn another_replicas_health_is_taken_as_it_is() {
        let now = Instant::now();
        let mut b = breaker(now);
        b.adopt(ProviderHealth::Unavailable, now);
        assert_eq!(b.health(), ProviderHealth::Unavailable);
        assert!(!b.allows_calls(), "open elsewhere, open here");
        assert!(!b.probe_due(now), "probed after the backoff, not at once");
        b.adopt(ProviderHealth::Degraded, now);
        assert_eq!(b.health(), ProviderHealth::Degraded);
        assert!(b.allows_calls());
        // Half-open: one more failure opens it again.
        b.record(Signal::Transient("x".into()), false, now, 0.0);
        assert_eq!(b.health(), ProviderHealth::Unavailable);
        b.adopt(ProviderHealth::Healthy, now);
        assert_eq!(b.health(), ProviderHealth::Healthy);
        // Closed: it takes the threshold of failures to open.
        b.record(Signal::Transient("x".into()), false, now, 0.0);
        assert_eq!(b.health(), ProviderHealth::Healthy);
    }

    #[test]
    fn degraded_probes_show_and_jitter_spreads_probes() {
        let t0 = Instant::now();
        let mut b = breaker(t0);
        let change = b
            .record(Signal::Degraded("slow".into()), true, t0, 0.0)
            .unwrap();
        assert_eq!(change.to, ProviderHealth::Degraded);
        assert_eq!(
            b.record(Signal::Success, true, t0, 0.0).unwrap().to,
            ProviderHealth::Healthy
        );
        b.record(Signal::Fatal("suspended".into()), false, t0, 0.99);
        let wait = b.retry_after(t0);
        assert!(
            wait > Duration::from_secs(6) && wait < Duration::from_millis(6250),
            "{wait:?}"
        );
    }
}
