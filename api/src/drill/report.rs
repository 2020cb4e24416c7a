//! What the drill found: the timeline it prints as it goes, one check per failure mode with
//! its measured figures, and the report as a table for people or JSON for scripts.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;

/// Events as they happen, printed to stderr at once (progress) and kept for the report.
pub struct Timeline {
    pub clock: Instant,
    entries: Mutex<Vec<TimelineEntry>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TimelineEntry {
    /// Milliseconds since the drill started.
    pub at_ms: u64,
    pub event: String,
}

impl Timeline {
    pub fn new() -> Self {
        Self {
            clock: Instant::now(),
            entries: Mutex::default(),
        }
    }

    /// Since the drill started.
    pub fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    pub fn note(&self, event: impl Into<String>) {
        let entry = TimelineEntry {
            at_ms: self.clock.elapsed().as_millis() as u64,
            event: event.into(),
        };
        eprintln!("[{:>7.1} s] {}", entry.at_ms as f64 / 1000.0, entry.event);
        self.entries.lock().expect("not poisoned").push(entry);
    }

    pub fn entries(&self) -> Vec<TimelineEntry> {
        self.entries.lock().expect("not poisoned").clone()
    }
}

/// One failure mode of the outage, what must hold, and what was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub expectation: String,
    pub measured: String,
    pub passed: bool,
    /// The figures behind `measured`, for scripts.
    pub figures: serde_json::Value,
}

impl Check {
    pub fn new(
        name: &'static str,
        expectation: impl Into<String>,
        passed: bool,
        measured: impl Into<String>,
        figures: serde_json::Value,
    ) -> Self {
        Self {
            name,
            expectation: expectation.into(),
            measured: measured.into(),
            passed,
            figures,
        }
    }
}

/// The whole run.
#[derive(Debug, Serialize)]
pub struct Report {
    pub passed: bool,
    pub started_at: DateTime<Utc>,
    pub duration_secs: f64,
    /// What it ran with.
    pub settings: serde_json::Value,
    pub checks: Vec<Check>,
    pub timeline: Vec<TimelineEntry>,
    /// Where its state and the control plane's log are (kept when a check failed).
    pub dir: String,
}

impl Report {
    pub fn new(
        started_at: DateTime<Utc>,
        timeline: &Timeline,
        settings: serde_json::Value,
        checks: Vec<Check>,
        dir: String,
    ) -> Self {
        Self {
            passed: !checks.is_empty() && checks.iter().all(|check| check.passed),
            started_at,
            duration_secs: timeline.now().as_secs_f64(),
            settings,
            checks,
            timeline: timeline.entries(),
            dir,
        }
    }

    /// The pass/fail table, one row per check.
    pub fn table(&self) -> String {
        let mut table = comfy_table::Table::new();
        table
            .load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
            .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
            .set_header(["", "failure mode", "must hold", "measured"]);
        for check in &self.checks {
            table.add_row([
                if check.passed { "PASS" } else { "FAIL" },
                check.name,
                &check.expectation,
                &check.measured,
            ]);
        }
        let verdict = if self.passed {
            "drill passed"
        } else {
            "drill FAILED"
        };
        format!(
            "{table}\n{verdict}: {} of {} checks passed in {:.0} s",
            self.checks.iter().filter(|c| c.passed).count(),
            self.checks.len(),
            self.duration_secs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(passes: &[bool]) -> Report {
        let checks = passes
            .iter()
            .map(|passed| {
                Check::new(
                    "breaker_opens",
                    "within 10 s",
                    *passed,
                    "1.2 s",
                    serde_json::json!({}),
                )
            })
            .collect();
        Report::new(
            Utc::now(),
            &Timeline::new(),
            serde_json::json!({}),
            checks,
            "/tmp/x".into(),
        )
    }

    #[test]
    fn one_failed_check_fails_the_drill_and_says_so() {
        let failed = report(&[true, false]);
        assert!(!failed.passed);
        let table = failed.table();
        assert!(
            table.contains("FAIL") && table.contains("drill FAILED"),
            "{table}"
        );
        assert!(table.contains("1 of 2 checks passed"), "{table}");
        let passed = report(&[true, true]);
        assert!(passed.passed);
        assert!(passed.table().contains("drill passed"));
        // No check at all is no evidence.
        assert!(!report(&[]).passed);
    }
}
