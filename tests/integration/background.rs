//! Background tasks under their driver: every task is listed in `GET /v1/status` with its last
//! activation; a task that panics is started again and the panic is reported (in the status
//! and in `/metrics`) while its work goes on; and a leader whose deploy task keeps failing
//! hands the deploys to another replica, which deploys.

use std::time::Duration;

use bulkhead::app::background::driver::{Fault, HANDOVER_AFTER};
use serde_json::Value;

use crate::deployments::{deploy, deployment_wait, fixture};
use crate::replicas::{first_replica_with_a_service, leader, replica_id, status};
use crate::support::{Backend, TestServer, eventually, platform};
use crate::{backend_tests, db_tests};

db_tests!(a_task_that_panics_is_started_again_and_reported);
backend_tests!(a_leader_whose_deploy_task_keeps_failing_hands_the_deploys_over);

/// The status of task `name` in `status`.
fn task<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no task {name}: {status:#}"))
}

async fn a_task_that_panics_is_started_again_and_reported(s: TestServer) {
    let _platform = platform(&s).await;
    let f = fixture(&s, 1, &["gcp"]).await;
    // Every task is listed, with what it does, and has run once at start.
    let seen = status(&s).await;
    for name in [
        "leases",
        "deploys",
        "push_intake",
        "commit_statuses",
        "webhook_deliveries",
        "instance_health",
        "routing",
        "deployment_streams",
        "provider_sync",
        "provider_probes",
        "maintenance",
        "login_limiter_trim",
    ] {
        let listed = task(&seen, name);
        assert!(
            listed["description"].as_str().is_some_and(|d| d.len() > 20),
            "{listed:#}"
        );
    }
    eventually("the deploy task's first activation", async || {
        task(&status(&s).await, "deploys")["activations"]
            .as_u64()
            .is_some_and(|n| n >= 1)
    })
    .await;

    s.app().tasks.fault_set("deploys", Some(Fault::PanicOnce));
    // The deployment wakes the task; its next activation panics, and the one after places
    // and rolls the deployment out.
    let made = deploy(&s, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    deployment_wait(&s, &f.service, id, "healthy", Duration::from_secs(60)).await;
    let seen = status(&s).await;
    let deploys = task(&seen, "deploys");
    assert_eq!(deploys["panics"], 1, "{deploys:#}");
    assert_eq!(deploys["failures"], 1, "{deploys:#}");
    assert_eq!(deploys["consecutive_failures"], 0, "{deploys:#}");
    assert_eq!(deploys["last_outcome"], "ok", "{deploys:#}");
    assert_eq!(
        deploys["last_error"],
        "panicked: fault injected: deploys panics once"
    );
    assert!(deploys["last_error_at"].is_string(), "{deploys:#}");
    // `/metrics` counts them too (its recorder is the process's: other tests' servers in
    // this process add to the same counters, so only this one's presence is certain).
    let metrics = s.call(reqwest::Method::GET, "/metrics", None, None).await;
    let counted = |prefix: &str| {
        metrics.text.lines().any(|line| {
            line.strip_prefix(prefix)
                .and_then(|value| value.trim().parse::<u64>().ok())
                .is_some_and(|value| value >= 1)
        })
    };
    assert!(
        counted("background_task_panics_total{task=\"deploys\"}"),
        "{}",
        metrics.text
    );
    assert!(
        counted("background_task_activations_total{task=\"deploys\",outcome=\"panicked\"}"),
        "{}",
        metrics.text
    );
    // The other tasks were not disturbed.
    for name in ["routing", "leases", "instance_health"] {
        assert_eq!(task(&seen, name)["panics"], 0, "{name}: {seen:#}");
    }
    s.stop().await;
}

async fn a_leader_whose_deploy_task_keeps_failing_hands_the_deploys_over(backend: Backend) {
    let Some((url, _dir, a, _platform, f)) = first_replica_with_a_service(backend).await else {
        return;
    };
    let b = TestServer::replica_start(backend, &url).await;
    let replicas = [&a, &b];
    let before = status(&a).await;
    let (holder, term) = leader(&before, "deploys").expect("a deploys leader");
    let (failing, other) = if holder == replica_id(&a) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    failing
        .app()
        .tasks
        .fault_set("deploys", Some(Fault::FailAlways));
    // Failing again and again, the leader gives the deploys up; the other replica takes them.
    eventually("another replica leads the deploys", async || {
        leader(&status(other).await, "deploys").is_some_and(|(now, _)| now == replica_id(other))
    })
    .await;
    let seen = status(failing).await;
    let failed = task(&seen, "deploys");
    assert_eq!(failed["state"], "handed_over", "{failed:#}");
    assert!(failed["handed_over_until"].is_string(), "{failed:#}");
    assert!(
        failed["consecutive_failures"].as_u64().unwrap() >= u64::from(HANDOVER_AFTER),
        "{failed:#}"
    );
    assert!(
        failed["last_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("fault injected: deploys fails (incident ")),
        "{failed:#}"
    );
    let (_, new_term) = leader(&status(other).await, "deploys").unwrap();
    assert!(
        new_term > term,
        "a takeover raises the term: {term} → {new_term}"
    );
    // The other replica deploys, whichever replica is asked.
    for s in replicas {
        let made = deploy(s, &f.owner, &f.service).await;
        let id = made["id"].as_str().unwrap().to_owned();
        deployment_wait(s, &f.service, &id, "healthy", Duration::from_secs(60)).await;
    }
    // While it is handed over, the failing replica does not take the lease back.
    assert!(
        !failing
            .app()
            .leases
            .leads(bulkhead::app::cluster::leases::Work::Deploys)
    );
    failing.app().tasks.fault_set("deploys", None);
    for s in [a, b] {
        s.stop().await;
    }
}
