//! Several replicas on one database: they start together (their migrations take turns), serve
//! the same API (a write through one is read through another, a session made on one is
//! accepted by the others), share each kind of background work through a lease with one
//! holder at a time, hand it over within the bound when its holder stops, and a replica that
//! lost a lease can neither act nor write with its old term.

use std::time::{Duration, Instant};

use bulkhead::app::cluster::leases::{LEASE_TTL, RENEW_EVERY, Work};
use bulkhead::dev::DevPlatform;
use sea_orm::{ConnectionTrait, Database, TransactionTrait};
use serde_json::Value;
use tempfile::TempDir;

use crate::backend_tests;
use crate::deployments::{Fixture, deploy, deployment_wait, fixture};
use crate::support::{ADMIN_TOKEN, Backend, TestServer, database_fresh, eventually, platform};

backend_tests!(
    replicas_start_together_and_serve_one_api,
    a_stopped_leader_hands_its_work_to_another_replica,
    a_replica_that_lost_its_lease_neither_acts_nor_writes
);

/// `GET /v1/status` through `s`.
pub(crate) async fn status(s: &TestServer) -> Value {
    s.get("/v1/status", ADMIN_TOKEN)
        .await
        .assert_status(200)
        .clone()
}

/// The current leader of `work` in `status`, with its term.
pub(crate) fn leader(status: &Value, work: &str) -> Option<(String, i64)> {
    status["leaders"]
        .as_array()?
        .iter()
        .find(|l| l["work"] == work && l["current"] == true)
        .map(|l| {
            (
                l["holder"].as_str().unwrap().to_owned(),
                l["term"].as_i64().unwrap(),
            )
        })
}

pub(crate) fn replica_id(s: &TestServer) -> String {
    s.app().leases.replica.clone()
}

/// A replica on a fresh database of `backend` with the local platform's providers and a
/// service of one replica on gcp; `None` (saying so) without PostgreSQL.
pub(crate) async fn first_replica_with_a_service(
    backend: Backend,
) -> Option<(String, TempDir, TestServer, (DevPlatform, TempDir), Fixture)> {
    let (url, dir) = database_fresh(backend).await?;
    let a = TestServer::replica_start(backend, &url).await;
    let platform = platform(&a).await;
    let f = fixture(&a, 1, &["gcp"]).await;
    Some((url, dir, a, platform, f))
}

async fn replicas_start_together_and_serve_one_api(backend: Backend) {
    let Some((url, _dir)) = database_fresh(backend).await else {
        return;
    };
    // Three replicas started at once on an empty database: before the set-up lock, two of
    // them failed on PostgreSQL (their CREATE TABLEs raced).
    let (a, b, c) = tokio::join!(
        TestServer::replica_start(backend, &url),
        TestServer::replica_start(backend, &url),
        TestServer::replica_start(backend, &url),
    );
    let ids = [replica_id(&a), replica_id(&b), replica_id(&c)];
    for s in [&a, &b, &c] {
        s.get("/readyz", ADMIN_TOKEN).await.assert_status(200);
    }
    // One administrator, however many replicas bootstrapped.
    let users = a.get("/v1/users?limit=100", ADMIN_TOKEN).await;
    let admins = users.assert_status(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["email"] == "admin@example.com")
        .count();
    assert_eq!(admins, 1, "{}", users.text);

    // A write through one replica is read through the others at once; a session made on one
    // is accepted by the others (one signing key).
    let owner = a.user_with_session("replica-owner@example.com").await;
    let project = b.project_create(&owner, "shared").await;
    for s in [&a, &c] {
        let read = s.get(&format!("/v1/projects/{project}"), &owner).await;
        assert_eq!(read.assert_status(200)["name"], "shared");
    }

    // Every replica is listed, alive, by any of them; each kind of work has one current
    // leader among them.
    let seen = status(&c).await;
    let listed: Vec<&str> = seen["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["alive"] == true)
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    for id in &ids {
        assert!(listed.contains(&id.as_str()), "{id} not in {seen:#}");
    }
    assert_eq!(seen["replica"], ids[2]);
    for work in Work::ALL.map(Work::as_str) {
        let (holder, term) = leader(&seen, work).unwrap_or_else(|| panic!("{work}: {seen:#}"));
        assert!(ids.contains(&holder), "{work} led by {holder}");
        assert!(term >= 1);
        // The holder knows it, and only the holder.
        for s in [&a, &b, &c] {
            let work = Work::of_kind(work).unwrap();
            assert_eq!(
                s.app().leases.leads(work),
                replica_id(s) == holder,
                "{work:?} on {}",
                replica_id(s)
            );
        }
    }
    // Status is for administrators, with a token of the `admin` scope: an administrator's
    // read-only token is refused too.
    let refused = a.get("/v1/status", &owner).await;
    refused.assert_problem(403, "forbidden");
    let read_only = a
        .post(
            "/v1/tokens",
            ADMIN_TOKEN,
            serde_json::json!({ "name": "watcher", "scopes": ["read"] }),
        )
        .await;
    let read_only = read_only.assert_status(201)["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = b.get("/v1/status", &read_only).await;
    refused.assert_problem(403, "insufficient_scope");

    // A replica is shown at its bound address, or at the URL it advertises.
    let d = TestServer::replica_start_with(backend, &url, |settings| {
        settings.advertise_url = Some("https://cp-d.example.com:8443".into());
    })
    .await;
    let seen = status(&a).await;
    let address_of = |id: &str| {
        seen["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id} not in {seen:#}"))["address"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(address_of(&replica_id(&d)), "https://cp-d.example.com:8443");
    assert_eq!(
        address_of(&ids[0]),
        a.base.trim_start_matches("http://"),
        "{seen:#}"
    );
    for s in [a, b, c, d] {
        s.stop().await;
    }
}

async fn a_stopped_leader_hands_its_work_to_another_replica(backend: Backend) {
    // The providers are configured before the others start, so that all of them run the
    // same plugins.
    let Some((url, _dir, a, _platform, f)) = first_replica_with_a_service(backend).await else {
        return;
    };
    // Alone, the first replica takes every lease.
    let alone = status(&a).await;
    let (first, _) = leader(&alone, "deploys").expect("a deploys leader");
    assert_eq!(first, replica_id(&a), "{alone:#}");
    let (b, c) = tokio::join!(
        TestServer::replica_start(backend, &url),
        TestServer::replica_start(backend, &url),
    );
    let mut replicas = vec![a, b, c];
    // On a loaded machine a renewal can come late while the others start, and another
    // replica rightly takes over (CI saw it): stop whichever leads now.
    let before = status(&replicas[0]).await;
    let (holder, term) = leader(&before, "deploys").expect("a deploys leader");
    let leading = replicas
        .iter()
        .position(|s| replica_id(s) == holder)
        .unwrap_or_else(|| panic!("{holder} is none of the replicas: {before:#}"));
    let stopped = Instant::now();
    replicas.remove(leading).stop().await;
    let (b, c) = (&replicas[0], &replicas[1]);
    let mut taken = None;
    while taken.is_none() {
        assert!(
            stopped.elapsed() < LEASE_TTL + RENEW_EVERY * 3,
            "no replica took the deploys lease within {:?}",
            LEASE_TTL + RENEW_EVERY * 3
        );
        taken = leader(&status(b).await, "deploys").filter(|(h, _)| *h != holder);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (new_holder, new_term) = taken.unwrap();
    assert!([replica_id(b), replica_id(c)].contains(&new_holder));
    assert_eq!(new_term, term + 1, "a change of leader raises the term");
    // A replica that stopped signs off.
    let after = status(c).await;
    assert!(
        after["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["id"] != holder.as_str()),
        "{after:#}"
    );

    // The new leader runs the deploy pipeline: a deployment made through either replica
    // becomes healthy.
    let made = deploy(c, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    let healthy = deployment_wait(b, &f.service, id, "healthy", Duration::from_secs(60)).await;
    assert_eq!(healthy["instances"].as_array().unwrap().len(), 1);
    for s in replicas {
        s.stop().await;
    }
}

async fn a_replica_that_lost_its_lease_neither_acts_nor_writes(backend: Backend) {
    let Some((url, _dir, a, _platform, f)) = first_replica_with_a_service(backend).await else {
        return;
    };
    let app = a.app().clone();
    let term = app
        .leases
        .term(Work::Deploys)
        .expect("a lone replica leads");
    {
        let txn = bulkhead::db::begin_write(&app.db).await.unwrap();
        app.lease_fence_term(&txn, Work::Deploys, term)
            .await
            .expect("the holder's own term passes");
        txn.commit().await.unwrap();
    }

    // Another replica (here: a statement in its place) takes the lease, as if this one had
    // been paused past its lease.
    let db = Database::connect(&url).await.unwrap();
    let far = match backend {
        Backend::Postgres => "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint + 60000",
        Backend::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 60000",
    };
    db.execute_unprepared(&format!(
        "UPDATE leases SET holder = 'replica-intruder', term = term + 1, expires_at_ms = {far} \
         WHERE kind = 'deploys'"
    ))
    .await
    .unwrap();
    // Its old term is refused inside a transaction, whatever it believes.
    {
        let txn = bulkhead::db::begin_write(&app.db).await.unwrap();
        let refused = app
            .lease_fence_term(&txn, Work::Deploys, term)
            .await
            .expect_err("a stale term is fenced off");
        assert_eq!(refused.code.as_str(), "not_ready");
        txn.rollback().await.unwrap();
    }
    // It learns of the loss at its next renewal, and stops acting: a deployment stays queued.
    eventually("the replica knows it lost the lease", async || {
        !app.leases.leads(Work::Deploys)
    })
    .await;
    let made = deploy(&a, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting = a
        .get(&format!("{}/deployments/{id}", f.service), ADMIN_TOKEN)
        .await;
    let waiting = waiting.assert_status(200);
    assert_eq!(waiting["state"], "queued", "{waiting:#}");
    assert!(
        waiting["instances"].as_array().unwrap().is_empty(),
        "{waiting:#}"
    );

    // When the lease lapses, it takes it back (a new term) and the deployment goes on.
    db.execute_unprepared("UPDATE leases SET expires_at_ms = 0 WHERE kind = 'deploys'")
        .await
        .unwrap();
    eventually("the replica takes the lease back", async || {
        app.leases
            .term(Work::Deploys)
            .is_some_and(|t| t == term + 2)
    })
    .await;
    deployment_wait(&a, &f.service, id, "healthy", Duration::from_secs(60)).await;

    // On PostgreSQL the fence holds the lease row while the transaction runs: a takeover waits
    // for it to end, so no write of an old term commits after a new leader began.
    if backend == Backend::Postgres {
        let term = app.leases.term(Work::Deploys).unwrap();
        let txn = app.db.begin().await.unwrap();
        app.lease_fence_term(&txn, Work::Deploys, term)
            .await
            .unwrap();
        let takeover = tokio::spawn(async move {
            db.execute_unprepared(
                "UPDATE leases SET holder = 'replica-intruder', term = term + 1 \
                 WHERE kind = 'deploys'",
            )
            .await
            .unwrap();
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !takeover.is_finished(),
            "the takeover waits for the fenced transaction"
        );
        txn.commit().await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), takeover)
            .await
            .expect("the takeover goes on once the transaction ends")
            .unwrap();
    }
    a.stop().await;
}
