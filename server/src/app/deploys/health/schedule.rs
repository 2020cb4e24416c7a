//! When each instance's next health check is due, and what its results add up to: the pure
//! part of [`crate::app::deploys::health`], kept apart from the probes and the database so that it
//! can be tested without either.
//!
//! Checks are spread over their interval: an instance first seen running is first checked at
//! an offset of its interval taken from its id (so 30,000 instances found at once, after a
//! restart or on taking the lead, do not all go out in the same tick), a starting one at once
//! (its rollout waits on it). After a check the next is due one interval later. The schedule
//! is a heap of due times, so a pass costs what is due, not what is scheduled.
//!
//! An instance whose provider checks it near the workload ([`crate::app::deploys::health::reports`]) is
//! covered by each report of it for [`REPORT_COVERS`]: its checks due meanwhile are not made,
//! and the report stands for them ([`HealthSchedule::report`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ids::InstanceId;
use chrono::{DateTime, Utc};

use crate::app::projects::services::spec::HealthCheckSpec;
use crate::entity::instance;
use crate::entity::instance::{InstanceHealth, InstanceState};
use crate::plugins::WorkloadHealth;

/// How long a provider's report of an instance stands for the control plane's own checks:
/// three rounds of reports ([`crate::app::deploys::health::reports::REPORT_EVERY`]), so that one slow round
/// does not bring the control plane's checks back, and a provider that stops answering does
/// within seconds.
pub const REPORT_COVERS: Duration = Duration::from_secs(3);

/// What the checks of one instance have shown so far.
#[derive(Debug, Clone)]
pub struct Scheduled {
    /// The instance as last read (its state and health are kept current by [`HealthSchedule::row_update`]).
    pub row: instance::Model,
    pub spec: Arc<HealthCheckSpec>,
    /// Consecutive results: positive, passes in a row; negative, failures in a row.
    pub streak: i32,
    next: Instant,
    in_flight: bool,
    /// Its provider's checks stand for the control plane's until then.
    covered_until: Option<Instant>,
    /// Whether its provider has reported it healthy since it was first scheduled. Until then,
    /// a `pending` report of a running instance only says that the provider's checks of it
    /// have not caught up with the control plane's (which found it healthy): it stands for
    /// nothing.
    reported_healthy: bool,
}

/// What a result means for the instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing changes.
    Same,
    /// A starting instance passed enough checks: it runs and serves.
    FirstHealthy,
    /// A starting instance did not pass within its start timeout: it fails, with its rollout.
    NeverHealthy,
    /// A running instance changes health (to the one given).
    Flip(InstanceHealth),
}

/// The due times of every checked instance.
#[derive(Default)]
pub struct HealthSchedule {
    entries: HashMap<InstanceId, Scheduled>,
    due: BinaryHeap<Reverse<(Instant, InstanceId)>>,
    /// Instance keys (as providers report them) to ids.
    keys: HashMap<String, InstanceId>,
}

impl HealthSchedule {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets everything (the lead was lost: another server checks now).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.due.clear();
        self.keys.clear();
    }

    /// Takes in the instances to check as read now. With `complete`, `rows` is every instance
    /// to check and the others are forgotten; otherwise `rows` only adds or refreshes.
    pub fn sync(
        &mut self,
        rows: impl IntoIterator<Item = (instance::Model, Arc<HealthCheckSpec>)>,
        complete: bool,
        now: Instant,
    ) {
        let mut seen = HashSet::new();
        for (row, spec) in rows {
            seen.insert(row.id);
            match self.entries.get_mut(&row.id) {
                Some(entry) => {
                    entry.row = row;
                    entry.spec = spec;
                }
                None => {
                    let next = if row.state == InstanceState::Starting {
                        now
                    } else {
                        now + first_offset(row.id, spec.interval())
                    };
                    self.due.push(Reverse((next, row.id)));
                    self.keys.insert(row.instance_key.clone(), row.id);
                    self.entries.insert(
                        row.id,
                        Scheduled {
                            row,
                            spec,
                            streak: 0,
                            next,
                            in_flight: false,
                            covered_until: None,
                            reported_healthy: false,
                        },
                    );
                }
            }
        }
        if complete {
            self.entries.retain(|id, _| seen.contains(id));
            self.keys.retain(|_, id| seen.contains(id));
            if self.due.len() > 2 * self.entries.len() + 64 {
                self.due.retain(|Reverse((at, id))| {
                    self.entries.get(id).is_some_and(|e| e.next == *at)
                });
            }
        }
    }

    /// When the earliest check is due (`None`: nothing to check).
    pub fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// Takes at most `limit` checks due by `now`; each stays out of the schedule until its
    /// result is recorded.
    pub fn take_due(
        &mut self,
        now: Instant,
        limit: usize,
    ) -> Vec<(InstanceId, String, Arc<HealthCheckSpec>)> {
        let mut taken = Vec::new();
        while taken.len() < limit {
            let Some(Reverse((at, id))) = self.due.peek().copied() else {
                break;
            };
            if at > now {
                break;
            }
            self.due.pop();
            let Some(entry) = self.entries.get_mut(&id) else {
                continue;
            };
            if entry.next != at || entry.in_flight {
                continue;
            }
            if let Some(until) = entry.covered_until.filter(|until| *until > now) {
                // Its provider checks it: look again when that report would lapse.
                entry.next = until;
                self.due.push(Reverse((until, id)));
                continue;
            }
            entry.in_flight = true;
            let address = entry.row.address.clone().unwrap_or_default();
            taken.push((id, address, entry.spec.clone()));
        }
        taken
    }

    /// Records a check's result, schedules the next, and says what it means.
    pub fn record(
        &mut self,
        id: InstanceId,
        passed: bool,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> Option<(&Scheduled, Verdict)> {
        let entry = self.entries.get_mut(&id)?;
        entry.in_flight = false;
        entry.streak = match (passed, entry.streak) {
            (true, n) if n > 0 => n.saturating_add(1),
            (true, _) => 1,
            (false, n) if n < 0 => n.saturating_sub(1),
            (false, _) => -1,
        };
        entry.next = now + entry.spec.interval();
        self.due.push(Reverse((entry.next, id)));
        let verdict = verdict(entry, wall);
        Some((entry, verdict))
    }

    /// Takes a provider's report of an instance's health (checked near the workload, with the
    /// service's thresholds applied), which stands for the control plane's checks for
    /// [`REPORT_COVERS`], and says what it means. `unchecked` ends the cover.
    pub fn report(
        &mut self,
        key: &str,
        health: WorkloadHealth,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> Option<(&Scheduled, Verdict)> {
        let id = *self.keys.get(key)?;
        let entry = self.entries.get_mut(&id)?;
        if health == WorkloadHealth::Unchecked {
            entry.covered_until = None;
            return None;
        }
        if health == WorkloadHealth::Pending
            && entry.row.state == InstanceState::Running
            && !entry.reported_healthy
        {
            // The control plane's own checks found this process healthy before the provider's
            // passed: those stand (and go on) until the provider's agree. A process restarted
            // after the provider saw it healthy is pending again, and leaves the routes below.
            return None;
        }
        entry.reported_healthy |= health == WorkloadHealth::Healthy;
        entry.covered_until = Some(now + REPORT_COVERS);
        // The streak the report stands for: the provider applied the thresholds.
        let healthy_threshold = entry.spec.healthy_threshold as i32;
        let unhealthy_threshold = entry.spec.unhealthy_threshold as i32;
        entry.streak = match health {
            WorkloadHealth::Healthy => healthy_threshold,
            // Not (or no longer) healthy: a running one leaves the routes.
            _ if entry.row.state == InstanceState::Running => -unhealthy_threshold,
            // A starting one is not healthy yet: its start timeout runs.
            _ => 0,
        };
        let verdict = verdict(entry, wall);
        Some((entry, verdict))
    }

    /// Keeps what was written of an instance (so the same change is not written twice).
    pub fn row_update(&mut self, id: InstanceId, state: InstanceState, health: InstanceHealth) {
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.row.state = state;
            entry.row.health = health;
        }
    }

    /// The row of the starting instance of `key`, if one is scheduled.
    pub fn starting(&self, key: &str) -> Option<&instance::Model> {
        let entry = self.entries.get(self.keys.get(key)?)?;
        (entry.row.state == InstanceState::Starting).then_some(&entry.row)
    }

    /// Stops checking an instance (it failed or left).
    pub fn remove(&mut self, id: InstanceId) {
        if let Some(entry) = self.entries.remove(&id) {
            self.keys.remove(&entry.row.instance_key);
        }
    }
}

/// Where in its first interval an instance already running is first checked: spread by its
/// id, so that instances found together are not checked together.
fn first_offset(id: InstanceId, interval: Duration) -> Duration {
    let millis = interval.as_millis().max(1);
    Duration::from_millis((id.uuid().as_u128() % millis) as u64)
}

/// What `entry`'s streak means for it, at `now`.
fn verdict(entry: &Scheduled, now: DateTime<Utc>) -> Verdict {
    let healthy_enough = entry.streak >= entry.spec.healthy_threshold as i32;
    let unhealthy_enough = entry.streak <= -(entry.spec.unhealthy_threshold as i32);
    match entry.row.state {
        InstanceState::Starting if healthy_enough => Verdict::FirstHealthy,
        InstanceState::Starting => {
            let started = now - entry.row.updated_at;
            if started.num_seconds() >= i64::from(entry.spec.start_timeout_secs) {
                Verdict::NeverHealthy
            } else {
                Verdict::Same
            }
        }
        InstanceState::Running if healthy_enough && entry.row.health != InstanceHealth::Healthy => {
            Verdict::Flip(InstanceHealth::Healthy)
        }
        InstanceState::Running
            if unhealthy_enough && entry.row.health != InstanceHealth::Unhealthy =>
        {
            Verdict::Flip(InstanceHealth::Unhealthy)
        }
        _ => Verdict::Same,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: InstanceState, health: InstanceHealth) -> instance::Model {
        let now = Utc::now();
        instance::Model {
            id: InstanceId::new(),
            deployment_id: Default::default(),
            service_id: Default::default(),
            project_id: Default::default(),
            instance_key: "i".into(),
            provider: "gcp".into(),
            region: "r".into(),
            address: Some("127.0.0.1:1".into()),
            provider_id: None,
            state,
            health,
            health_checked_at: None,
            health_streak: 0,
            attempts: 0,
            next_attempt_at: None,
            last_error: String::new(),
            replaces: None,
            claimed_by: None,
            claimed_until: None,
            dispatch_order: 0,
            created_at: now,
            updated_at: now,
        }
    }

    fn spec(interval_ms: u64) -> Arc<HealthCheckSpec> {
        Arc::new(HealthCheckSpec {
            interval_ms,
            ..HealthCheckSpec::default()
        })
    }

    #[test]
    fn running_instances_found_together_are_checked_spread_over_their_interval() {
        let mut schedule = HealthSchedule::default();
        let now = Instant::now();
        let rows: Vec<_> = (0..1000)
            .map(|_| {
                (
                    row(InstanceState::Running, InstanceHealth::Healthy),
                    spec(10_000),
                )
            })
            .collect();
        schedule.sync(rows, true, now);
        // Each tenth of the interval holds about a tenth of them, none more than twice that.
        let mut taken_before = 0;
        for tenth in 1..=10 {
            let at = now + Duration::from_millis(tenth * 1000);
            let taken = schedule.take_due(at, usize::MAX).len();
            assert!(taken < 200, "{taken} checks due in tenth {tenth}");
            taken_before += taken;
        }
        assert_eq!(taken_before, 1000);
        assert!(
            schedule
                .take_due(now + Duration::from_secs(60), usize::MAX)
                .is_empty()
        );
    }

    #[test]
    fn a_starting_instance_is_checked_at_once_and_then_every_interval() {
        let mut schedule = HealthSchedule::default();
        let now = Instant::now();
        let starting = row(InstanceState::Starting, InstanceHealth::Unknown);
        let id = starting.id;
        schedule.sync([(starting, spec(2000))], true, now);
        assert_eq!(schedule.take_due(now, 10).len(), 1);
        // In flight: not taken again before its result.
        assert!(
            schedule
                .take_due(now + Duration::from_secs(5), 10)
                .is_empty()
        );
        let (_, verdict) = schedule.record(id, true, now, Utc::now()).unwrap();
        assert_eq!(verdict, Verdict::FirstHealthy);
        assert!(
            schedule
                .take_due(now + Duration::from_millis(1999), 10)
                .is_empty()
        );
        assert_eq!(
            schedule
                .take_due(now + Duration::from_millis(2000), 10)
                .len(),
            1
        );
    }

    #[test]
    fn health_flips_after_the_thresholds_and_is_not_flipped_twice() {
        let mut schedule = HealthSchedule::default();
        let now = Instant::now();
        let running = row(InstanceState::Running, InstanceHealth::Healthy);
        let id = running.id;
        schedule.sync([(running, spec(1000))], true, now);
        let verdicts: Vec<_> = (0..3)
            .map(|_| schedule.record(id, false, now, Utc::now()).unwrap().1)
            .collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Same,
                Verdict::Same,
                Verdict::Flip(InstanceHealth::Unhealthy)
            ]
        );
        schedule.row_update(id, InstanceState::Running, InstanceHealth::Unhealthy);
        assert_eq!(
            schedule.record(id, false, now, Utc::now()).unwrap().1,
            Verdict::Same
        );
        assert_eq!(
            schedule.record(id, true, now, Utc::now()).unwrap().1,
            Verdict::Flip(InstanceHealth::Healthy)
        );
    }

    #[test]
    fn a_pending_report_does_not_undo_what_the_control_planes_checks_found_first() {
        let mut schedule = HealthSchedule::default();
        let now = Instant::now();
        let mut starting = row(InstanceState::Starting, InstanceHealth::Unknown);
        starting.instance_key = "web-1".into();
        let id = starting.id;
        schedule.sync([(starting, spec(500))], true, now);
        let wall = Utc::now();
        // No report yet: the control plane checks it, and it passes.
        assert_eq!(schedule.take_due(now, 10).len(), 1);
        let (_, verdict) = schedule.record(id, true, now, wall).unwrap();
        assert_eq!(verdict, Verdict::FirstHealthy);
        schedule.row_update(id, InstanceState::Running, InstanceHealth::Healthy);

        // The agent has not checked the new process enough yet: it reports `pending`, which
        // neither takes it out of the routes nor stops the control plane's checks.
        for second in 0..3 {
            let at = now + Duration::from_millis(300 * second);
            assert!(
                schedule
                    .report("web-1", WorkloadHealth::Pending, at, wall)
                    .is_none()
            );
        }
        let later = now + Duration::from_millis(500);
        assert_eq!(schedule.take_due(later, 10).len(), 1, "still checked here");
        let (_, verdict) = schedule.record(id, true, later, wall).unwrap();
        assert_eq!(verdict, Verdict::Same);

        // Once the agent agrees, its reports stand; a pending one then means a new process.
        let (_, verdict) = schedule
            .report("web-1", WorkloadHealth::Healthy, later, wall)
            .unwrap();
        assert_eq!(verdict, Verdict::Same);
        let (_, verdict) = schedule
            .report("web-1", WorkloadHealth::Pending, later, wall)
            .unwrap();
        assert_eq!(verdict, Verdict::Flip(InstanceHealth::Unhealthy));
    }

    #[test]
    fn a_reported_instance_is_not_checked_while_the_reports_keep_coming() {
        let mut schedule = HealthSchedule::default();
        let now = Instant::now();
        let mut starting = row(InstanceState::Starting, InstanceHealth::Unknown);
        starting.instance_key = "web-1".into();
        let id = starting.id;
        schedule.sync([(starting, spec(500))], true, now);
        let wall = Utc::now();
        assert!(
            schedule
                .report("other", WorkloadHealth::Healthy, now, wall)
                .is_none()
        );
        let (_, verdict) = schedule
            .report("web-1", WorkloadHealth::Pending, now, wall)
            .unwrap();
        assert_eq!(
            verdict,
            Verdict::Same,
            "not healthy yet, within its start timeout"
        );
        assert!(
            schedule.take_due(now, 10).is_empty(),
            "covered: no check of its own"
        );
        let (entry, verdict) = schedule
            .report("web-1", WorkloadHealth::Healthy, now, wall)
            .unwrap();
        assert_eq!((verdict, entry.streak), (Verdict::FirstHealthy, 1));
        schedule.row_update(id, InstanceState::Running, InstanceHealth::Healthy);

        // Reports every second keep it covered; a pending (restarted) process leaves the routes.
        for second in 1..=5 {
            let at = now + Duration::from_secs(second);
            assert!(schedule.take_due(at, 10).is_empty(), "second {second}");
            let (_, verdict) = schedule
                .report("web-1", WorkloadHealth::Healthy, at, wall)
                .unwrap();
            assert_eq!(verdict, Verdict::Same);
        }
        let at = now + Duration::from_secs(5);
        let (entry, verdict) = schedule
            .report("web-1", WorkloadHealth::Pending, at, wall)
            .unwrap();
        assert_eq!(
            (verdict, entry.streak),
            (Verdict::Flip(InstanceHealth::Unhealthy), -3)
        );
        schedule.row_update(id, InstanceState::Running, InstanceHealth::Unhealthy);
        let (_, verdict) = schedule
            .report("web-1", WorkloadHealth::Unhealthy, at, wall)
            .unwrap();
        assert_eq!(verdict, Verdict::Same, "flipped once");

        // The reports stop: once the last one lapses, the control plane checks it again.
        assert!(
            schedule
                .take_due(at + REPORT_COVERS - Duration::from_millis(1), 10)
                .is_empty()
        );
        assert_eq!(schedule.take_due(at + REPORT_COVERS, 10).len(), 1);
        // `unchecked` ends the cover at once.
        schedule.record(id, true, at + REPORT_COVERS, wall);
        schedule.report("web-1", WorkloadHealth::Healthy, at + REPORT_COVERS, wall);
        assert!(
            schedule
                .report("web-1", WorkloadHealth::Unchecked, at, wall)
                .is_none()
        );
        let later = at + REPORT_COVERS + Duration::from_millis(500);
        assert_eq!(schedule.take_due(later, 10).len(), 1);
    }

    #[test]
    fn a_starting_instance_past_its_start_timeout_never_became_healthy() {
        let mut schedule = HealthSchedule::default();
        let now = Instant::now();
        let mut starting = row(InstanceState::Starting, InstanceHealth::Unknown);
        starting.updated_at = Utc::now() - chrono::Duration::seconds(121);
        let id = starting.id;
        schedule.sync([(starting, spec(1000))], true, now);
        assert_eq!(
            schedule.record(id, false, now, Utc::now()).unwrap().1,
            Verdict::NeverHealthy
        );
    }

    #[test]
    fn a_complete_sync_forgets_instances_no_longer_checked() {
        let mut schedule = HealthSchedule::default();
        let now = Instant::now();
        let kept = row(InstanceState::Running, InstanceHealth::Healthy);
        let gone = row(InstanceState::Running, InstanceHealth::Healthy);
        let gone_id = gone.id;
        schedule.sync([(kept.clone(), spec(1000)), (gone, spec(1000))], true, now);
        schedule.sync([(kept, spec(1000))], true, now);
        assert_eq!(schedule.len(), 1);
        assert!(schedule.record(gone_id, true, now, Utc::now()).is_none());
        // A partial sync adds, never forgets.
        schedule.sync(
            [(
                row(InstanceState::Starting, InstanceHealth::Unknown),
                spec(1000),
            )],
            false,
            now,
        );
        assert_eq!(schedule.len(), 2);
    }
}
