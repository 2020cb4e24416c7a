//! The database's primary lost, its standby promoted. Two replicas run on two PostgreSQL
//! servers of the test's own in synchronous replication (`initdb`, `pg_basebackup`,
//! `synchronous_standby_names = '*'`), given both in one URL. While writers go on through both
//! replicas (each write retried with its idempotency key until it is acknowledged), the primary
//! is stopped as a crash would and, a second later, the standby promoted as Patroni would. Then:
//! both replicas follow the new primary on their own; every acknowledged write is on it, none
//! made twice; every kind of work is led by exactly one replica; sign-in, deploys and the
//! routing table work; a token revoked after the failover is refused by the other replica
//! within 1 s. Answers meanwhile are 201 or 503 `not_ready`, never a 500.
//!
//! Runs where the other PostgreSQL tests run (`BULKHEAD_TEST_POSTGRES_URL` set), and then
//! needs PostgreSQL's server programs (`apt-get install postgresql`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkhead::dev::postgres::{ReplicatedPostgres, Replication};
use reqwest::Method;
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use serde_json::json;

use crate::deployments::{deploy, deployment_wait, fixture};
use crate::postgres_restart::{one_leader_each, revocation_reaches_the_other};
use crate::replica_changes::within;
use crate::support::{ADMIN_TOKEN, Backend, TestServer, domain_bind, platform};

/// One writer's acknowledged writes: the project's name, its id, and when it was acknowledged.
type Acknowledged = Arc<Mutex<Vec<(String, String, Instant)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_follow_a_promoted_standby_and_lose_no_acknowledged_write() {
    if std::env::var("BULKHEAD_TEST_POSTGRES_URL").map_or(true, |url| url.is_empty()) {
        crate::support::postgres_skipped();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let postgres = ReplicatedPostgres::start(&dir.path().join("db"), Replication::Synchronous)
        .await
        .expect("this test runs two PostgreSQL servers of its own");
    let url = postgres.url();
    let unlimited = |settings: &mut bulkhead::config::Settings| {
        settings.limits.projects_per_user = 100_000;
    };
    let a = TestServer::replica_start_with(Backend::Postgres, &url, unlimited).await;
    let (_platform, _platform_dir) = platform(&a).await;
    let f = fixture(&a, 1, &["gcp"]).await;
    let b = TestServer::replica_start_with(Backend::Postgres, &url, unlimited).await;
    let primary_label = format!("127.0.0.1:{}", postgres.primary.port());
    let standby_label = format!("127.0.0.1:{}", postgres.standby.port());
    for s in [&a, &b] {
        assert_eq!(
            s.app().primary.as_ref().unwrap().status().server,
            primary_label
        );
    }
    let user = "failover-user@example.com";
    a.user_create(user).await;
    let (a, b) = (Arc::new(a), Arc::new(b));

    // Writers through both replicas, one write at a time each: a write not acknowledged is
    // sent again with its idempotency key until it is.
    let acknowledged: Acknowledged = Arc::default();
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Writes whose first attempt took effect but whose answer was lost with the primary.
    let lost: Arc<Mutex<Vec<String>>> = Arc::default();
    let writers: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(n, replica)| {
            let (acknowledged, refused, stop, lost) = (
                acknowledged.clone(),
                refused.clone(),
                stop.clone(),
                lost.clone(),
            );
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    i += 1;
                    let name = format!("w{n}-{i}");
                    loop {
                        let answer = TestServer::send(
                            replica
                                .request(Method::POST, "/v1/projects", Some(ADMIN_TOKEN))
                                .header("idempotency-key", &name)
                                .json(&json!({ "name": name })),
                        )
                        .await;
                        match answer.status {
                            201 => {
                                let id = answer.body["id"].as_str().unwrap().to_owned();
                                acknowledged
                                    .lock()
                                    .unwrap()
                                    .push((name, id, Instant::now()));
                                break;
                            }
                            // The first attempt took effect as the primary died, and its
                            // answer was lost: it is not run again. Acknowledged, id unknown.
                            409 if answer.body["code"] == "idempotency_response_lost" => {
                                lost.lock().unwrap().push(name);
                                break;
                            }
                            // Refused while the database fails over; or the first attempt's
                            // claim of the key is still being released: "retry later".
                            503 | 409 => {
                                let code = answer.body["code"].as_str().unwrap_or_default();
                                assert!(
                                    (answer.status, code) == (503, "not_ready")
                                        || (answer.status, code)
                                            == (409, "idempotency_in_progress"),
                                    "{name}: {}",
                                    answer.text
                                );
                                refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            status => panic!("{name}: {status} {}", answer.text),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    within(
        "writes acknowledged before the failover",
        Duration::from_secs(30),
        async || acknowledged.lock().unwrap().len() >= 20,
    )
    .await;

    // The primary's cloud is gone; a second later the failover manager promotes the standby.
    postgres.primary_kill().await.unwrap();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    postgres.standby_promote().await.unwrap();
    let promoted = Instant::now();
    eprintln!(
        "primary killed; standby promoted {:?} later",
        promoted - killed
    );
    let before = acknowledged.lock().unwrap().len();
    for (name, replica) in [("a", &a), ("b", &b)] {
        let took = within(
            &format!("{name} follows the promoted standby"),
            Duration::from_secs(10),
            async || {
                let status = replica.app().primary.as_ref().unwrap().status();
                status.server == standby_label && status.reachable
            },
        )
        .await;
        eprintln!("{name} follows the new primary {took:?} after the promotion");
        within(
            &format!("{name} ready and listening to changes again"),
            Duration::from_secs(10),
            async || {
                replica.get("/readyz", ADMIN_TOKEN).await.status == 200
                    && replica.app().changes.listening()
            },
        )
        .await;
    }
    within(
        "writes acknowledged through both replicas after the promotion",
        Duration::from_secs(10),
        async || {
            let acknowledged = acknowledged.lock().unwrap();
            ["w0-", "w1-"].iter().all(|writer| {
                acknowledged
                    .iter()
                    .any(|(name, _, at)| name.starts_with(writer) && *at > promoted)
            })
        },
    )
    .await;
    let first_write = acknowledged
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, at)| *at > promoted)
        .map(|(_, _, at)| *at - promoted)
        .min()
        .unwrap();
    eprintln!("first write acknowledged {first_write:?} after the promotion");
    one_leader_each(&a, &b).await;
    within(
        "20 more writes acknowledged",
        Duration::from_secs(10),
        async || acknowledged.lock().unwrap().len() >= before + 20,
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    for writer in writers {
        writer
            .await
            .expect("a writer saw only 201 and 503 not_ready");
    }

    // Every acknowledged write is on the new primary, each made once.
    let acknowledged = acknowledged.lock().unwrap().clone();
    eprintln!(
        "{} writes acknowledged; {} answers 503 while the database failed over",
        acknowledged.len(),
        refused.load(std::sync::atomic::Ordering::Relaxed)
    );
    let new_primary = Database::connect(postgres.standby.url(bulkhead::dev::postgres::DATABASE))
        .await
        .unwrap();
    let rows = new_primary
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT name, id::text AS id FROM projects WHERE name LIKE 'w%'",
        ))
        .await
        .unwrap();
    let mut stored: HashMap<String, Vec<String>> = HashMap::new();
    for row in rows {
        let name: String = row.try_get("", "name").unwrap();
        let id: String = row.try_get("", "id").unwrap();
        stored.entry(name).or_default().push(id);
    }
    for (name, id, _) in &acknowledged {
        let ids = stored.get(name).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            ids,
            std::slice::from_ref(id),
            "{name}: acknowledged as {id}, stored {ids:?}"
        );
    }
    let lost = lost.lock().unwrap().clone();
    eprintln!("{} writes took effect with their answers lost", lost.len());
    for name in &lost {
        let ids = stored.get(name).map_or(0, Vec::len);
        assert_eq!(ids, 1, "{name}: took effect, stored {ids} times");
    }
    let doubled: Vec<_> = stored.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(doubled.is_empty(), "written twice: {doubled:?}");
    new_primary.close().await.unwrap();

    // Sign-in, deploys and the routing table work on the new primary.
    for s in [&a, &b] {
        s.login(user).await;
    }
    let made = deploy(&b, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    deployment_wait(&a, &f.service, id, "healthy", Duration::from_secs(60)).await;
    let table_before = routing_revision(&a).await;
    let service = f.service.rsplit('/').next().unwrap();
    domain_bind(&b, &f.owner, &f.project, service, "failover.example.com").await;
    within(
        "both replicas serve a newer routing table",
        Duration::from_secs(10),
        async || {
            let (ra, rb) = (routing_revision(&a).await, routing_revision(&b).await);
            ra > table_before && ra == rb
        },
    )
    .await;

    // A token revoked through a after the failover is refused by b within 1 s.
    revocation_reaches_the_other(&a, &b).await;
    for s in [&a, &b] {
        let status = s.app().primary.as_ref().unwrap().status();
        assert_eq!(status.switches, 1, "{status:?}");
    }
    for replica in [a, b] {
        Arc::into_inner(replica)
            .expect("the writers ended")
            .stop()
            .await;
    }
}

/// The revision of the routing table `s` serves.
async fn routing_revision(s: &TestServer) -> i64 {
    let table = s.get("/v1/routing-table", ADMIN_TOKEN).await;
    table.assert_status(200)["table"]["revision"]
        .as_i64()
        .unwrap()
}
