//! `bulkhead drill`, short: the real binary plays the whole outage (GCP suspended, control
//! plane killed with the edge agent restarted meanwhile, a backlog drained, GCP restored)
//! against its own control plane process, simulators, agent and a real Caddy, on SQLite and
//! on PostgreSQL, and its JSON report must say that every check passed, with figures that
//! make sense. With `--replicas 3 --database-failover`, the deploys' leader is SIGKILLed under
//! API traffic through a Caddy in front of the replicas while deploys are in flight, and then
//! the drill's own PostgreSQL primary is killed and its synchronous standby promoted.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Backend, database_fresh};

const BIN: &str = env!("CARGO_BIN_EXE_bulkhead");

/// Every check a drill answers, in order.
const CHECKS: [&str; 18] = [
    "breaker_opens",
    "dead_instances_leave_routes",
    "others_stay_healthy",
    "deploys_fail_over",
    "edge_serves_through_gcp_outage",
    "edge_serves_without_control_plane",
    "every_domain_https_in_outage",
    "edge_restarts_from_disk",
    "backlog_drains_at_rate",
    "pushes_deploy_exactly_once",
    "intake_answers_fast",
    "signed_in_users_stay_signed_in",
    "sign_ins_resume",
    "forge_limits_honoured",
    "breaker_closes",
    "placements_use_gcp_again",
    "edge_serves_through_recovery",
    "user_records_intact",
];

/// Every check of a drill with replicas and a database failover, in order.
const REPLICA_CHECKS: [&str; 27] = [
    "breaker_opens",
    "dead_instances_leave_routes",
    "others_stay_healthy",
    "deploys_fail_over",
    "edge_serves_through_gcp_outage",
    "leader_replaced",
    "api_serves_through_replica_kill",
    "edge_serves_through_replica_kill",
    "backlog_drains_at_rate",
    "no_instance_doubled_or_orphaned",
    "acknowledged_writes_kept",
    "killed_replica_rejoins",
    "replicas_follow_new_primary",
    "api_answers_through_failover",
    "no_acknowledged_write_lost",
    "revocation_after_failover",
    "deploys_after_failover",
    "edge_serves_through_database_failover",
    "pushes_deploy_exactly_once",
    "intake_answers_fast",
    "signed_in_users_stay_signed_in",
    "sign_ins_resume",
    "forge_limits_honoured",
    "breaker_closes",
    "placements_use_gcp_again",
    "edge_serves_through_recovery",
    "user_records_intact",
];

/// Runs a short drill of `replicas` control-plane replicas on a fresh database (with
/// `failover`, on the drill's own PostgreSQL servers, failed over): its exit status and its
/// JSON report.
async fn drill_short(
    backend: Backend,
    replicas: u32,
    failover: bool,
) -> Option<(bool, Value, String)> {
    let (database_url, db_dir) = database_fresh(backend).await?;
    let dir = tempfile::tempdir().unwrap();
    let database = match failover {
        true => vec!["--database-failover".to_owned()],
        false => vec!["--database-url".to_owned(), database_url],
    };
    let mut child = Command::new(BIN)
        .args(["drill", "--services", "2", "--outage-secs", "4"])
        .args(["--backlog", "8", "--drain-rate", "4", "--output", "json"])
        .arg("--replicas")
        .arg(replicas.to_string())
        .args(&database)
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            panic!("the drill ran for more than 300 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let output = child.wait_with_output().unwrap();
    drop(db_dir);
    if !output.status.success() {
        // The control plane's logs, for whoever reads the failure.
        eprintln!("the drill's directory is kept: {}", dir.keep().display());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|err| panic!("not a JSON report ({err}): {stdout}\n{stderr}"));
    Some((output.status.success(), report, stderr))
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report:#}"))
}

fn figure(report: &Value, name: &str, figure: &str) -> f64 {
    let check = check(report, name);
    check["figures"][figure]
        .as_f64()
        .unwrap_or_else(|| panic!("no figure {figure} in {check:#}"))
}

/// That the drill answered exactly `checks`, each passed, and exited 0.
fn all_passed(success: bool, report: &Value, timeline: &str, checks: &[&str]) {
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, checks, "{report:#}\n{timeline}");
    for check in report["checks"].as_array().unwrap() {
        assert_eq!(check["passed"], true, "{check:#}\n{timeline}");
    }
    assert_eq!(report["passed"], true);
    assert!(success, "a passing drill exits 0");
}

/// The user records the drill compared: the administrator and three users, and what they did.
fn records_counted(report: &Value) {
    let records = &check(report, "user_records_intact")["figures"]["before"];
    assert_eq!(
        records["users"], 20,
        "the administrator, three users and the sign-in crowd of 16"
    );
    assert_eq!(records["memberships"], 3);
    assert_eq!(records["terms_acceptances"], 3);
    assert!(records["audit_events"].as_u64().unwrap() > 10, "{records}");
}

async fn the_short_drill_passes(backend: Backend) {
    let Some((success, report, timeline)) = drill_short(backend, 1, false).await else {
        return; // said by `database_fresh`
    };
    all_passed(success, &report, &timeline, &CHECKS);

    // The figures behind the verdicts.
    let domains = figure(&report, "every_domain_https_in_outage", "domains");
    assert!(domains >= 2.0, "every domain over HTTPS: {report:#}");
    assert_eq!(
        figure(&report, "every_domain_https_in_outage", "domains_answered"),
        domains
    );
    let opened = figure(&report, "breaker_opens", "seconds");
    assert!(opened > 0.0 && opened < 15.0, "{opened}");
    for phase in [
        "edge_serves_through_gcp_outage",
        "edge_serves_without_control_plane",
        "edge_serves_through_recovery",
    ] {
        let requests = figure(&report, phase, "requests");
        assert!(requests >= 20.0, "{phase}: {report:#}");
        // Caddy 2.6 may answer a request or two itself while it loads a configuration.
        let allowed = 1.0 + (requests / 100.0).floor();
        assert!(
            figure(&report, phase, "failed") <= allowed,
            "{phase}: {report:#}"
        );
    }
    assert_eq!(figure(&report, "backlog_drains_at_rate", "deploys"), 8.0);
    assert!(figure(&report, "backlog_drains_at_rate", "peak_per_second") <= 5.0);
    // 8 provisions at 4 a second: 7 intervals of at least 250 ms.
    assert!(
        figure(&report, "backlog_drains_at_rate", "seconds") >= 1.5,
        "{report:#}"
    );
    // The forge's backlog: every push deployed once, the forge's limit never exceeded.
    assert_eq!(
        figure(&report, "pushes_deploy_exactly_once", "deployments"),
        40.0
    );
    assert_eq!(figure(&report, "forge_limits_honoured", "over_limit"), 0.0);
    assert!(figure(&report, "forge_limits_honoured", "statuses") >= 40.0);
    assert_eq!(
        figure(&report, "forge_limits_honoured", "oauth_during_hold"),
        0.0
    );
    // The forge limited the crowd's sign-ins: it answered 429 at least once, and all signed in.
    assert!(figure(&report, "forge_limits_honoured", "oauth_limited") >= 1.0);
    assert_eq!(figure(&report, "sign_ins_resume", "users"), 8.0);
    assert_eq!(
        figure(&report, "signed_in_users_stay_signed_in", "failed"),
        0.0
    );
    records_counted(&report);
    // The timeline went to stderr as it happened.
    assert!(timeline.contains("control plane killed"), "{timeline}");
    assert!(
        report["timeline"].as_array().unwrap().len() >= 10,
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_short_drill_passes_on_sqlite() {
    the_short_drill_passes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_short_drill_passes_on_postgres() {
    the_short_drill_passes(Backend::Postgres).await;
}

/// Three replicas behind Caddy: the deploys' leader is SIGKILLed with deploys in flight and
/// sign-ins, reads and writes going through the balancer; then the database's primary is
/// killed and its standby promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_short_drill_with_three_replicas_and_a_database_failover_passes() {
    let Some((success, report, timeline)) = drill_short(Backend::Postgres, 3, true).await else {
        return; // said by `database_fresh`
    };
    all_passed(success, &report, &timeline, &REPLICA_CHECKS);
    assert_eq!(report["settings"]["replicas"], 3, "{report:#}");

    // Another replica led everything within the bound, and the killed one led the deploys.
    let takeover = figure(&report, "leader_replaced", "seconds");
    assert!(takeover > 0.0 && takeover <= 5.0, "{takeover}");
    let work = &check(&report, "leader_replaced")["figures"]["work"];
    assert!(
        work.as_array().unwrap().iter().any(|w| w == "deploys"),
        "{work}"
    );
    // Traffic of every kind went through the balancer, and at most the requests in flight
    // to the killed replica (one per worker) failed.
    let api = &check(&report, "api_serves_through_replica_kill")["figures"];
    for operation in ["service_list", "environment_create", "session_login"] {
        assert!(
            api["by_operation"][operation].as_u64().unwrap() >= 2,
            "{operation}: {api:#}"
        );
    }
    assert!(api["requests"].as_u64().unwrap() >= 50, "{api:#}");
    assert!(api["failed"].as_u64().unwrap() <= 3, "{api:#}");
    assert!(figure(&report, "acknowledged_writes_kept", "acknowledged") >= 10.0);
    assert_eq!(
        check(&report, "acknowledged_writes_kept")["figures"]["lost"],
        serde_json::json!([])
    );
    assert_eq!(
        figure(&report, "no_instance_doubled_or_orphaned", "deploys"),
        8.0
    );
    // The leader died with provider calls under way (each AWS call takes 300 ms then).
    assert!(
        figure(
            &report,
            "no_instance_doubled_or_orphaned",
            "aws_calls_under_way_at_kill"
        ) >= 1.0,
        "{report:#}"
    );
    assert_eq!(figure(&report, "backlog_drains_at_rate", "deploys"), 8.0);
    assert!(figure(&report, "killed_replica_rejoins", "seconds") <= 30.0);
    records_counted(&report);
    assert!(timeline.contains("killed (SIGKILL)"), "{timeline}");
    assert!(timeline.contains("behind Caddy"), "{timeline}");

    // The database failed over: every replica followed the promoted standby and writes resumed
    // within the bound; what failed meanwhile answered 503; nothing acknowledged was lost.
    assert!(
        report["settings"]["database"]
            .as_str()
            .unwrap()
            .contains("failed over"),
        "{report:#}"
    );
    let followed = figure(&report, "replicas_follow_new_primary", "followed_seconds");
    let first_write = figure(
        &report,
        "replicas_follow_new_primary",
        "first_write_seconds",
    );
    assert!(followed > 0.0 && followed <= 10.0, "{report:#}");
    assert!(first_write > 0.0 && first_write <= 10.0, "{report:#}");
    let api = &check(&report, "api_answers_through_failover")["figures"];
    assert_eq!(api["failed"], api["unavailable"], "{api:#}");
    assert!(figure(&report, "no_acknowledged_write_lost", "acknowledged") >= 10.0);
    assert!(figure(&report, "revocation_after_failover", "seconds") <= 1.0);
    assert!(timeline.contains("promoted"), "{timeline}");
}
