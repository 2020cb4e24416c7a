//! PostgreSQL itself restarted under load. Two replicas run on a PostgreSQL cluster of the
//! test's own (`initdb` and `pg_ctl` of the installed server, on a port of its own: the
//! shared one is not restarted under the other tests). While it restarts, writes go on
//! through both replicas: each is answered 201 or 503 `not_ready` (never a 500), every one
//! acknowledged is there afterwards, and both replicas recover without a restart of their
//! own — ready, every kind of work led by one of them, listening to changes again (a token
//! revoked through one is refused by the other within 1 s).
//!
//! Runs where the other PostgreSQL tests run (`BULKHEAD_TEST_POSTGRES_URL` set), and then
//! needs PostgreSQL's server programs (`apt-get install postgresql`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkhead::app::cluster::leases::Work;
use bulkhead::dev::postgres::{PostgresServer, StopMode};
use serde_json::json;

use crate::replica_changes::within;
use crate::support::{ADMIN_TOKEN, Backend, TestServer, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_recover_on_their_own_when_postgres_restarts_under_load() {
    if std::env::var("BULKHEAD_TEST_POSTGRES_URL").map_or(true, |url| url.is_empty()) {
        crate::support::postgres_skipped();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let postgres = PostgresServer::create(dir.path(), "data")
        .await
        .expect("this test runs its own PostgreSQL");
    let url = postgres.url("postgres");
    // The writers make a project every 20 ms each for as long as the restart takes: more than
    // one user may own by default.
    let unlimited = |settings: &mut bulkhead::config::Settings| {
        settings.limits.projects_per_user = 100_000;
    };
    let a = TestServer::replica_start_with(Backend::Postgres, &url, unlimited).await;
    let b = TestServer::replica_start_with(Backend::Postgres, &url, unlimited).await;
    let (a, b) = (Arc::new(a), Arc::new(b));

    // Writes through both replicas, one at a time each, for the whole test.
    let acknowledged: Arc<Mutex<Vec<String>>> = Arc::default();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(n, replica)| {
            let (acknowledged, refused, stop) =
                (acknowledged.clone(), refused.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    i += 1;
                    let name = format!("r{n}-{i}");
                    let answer = replica
                        .post("/v1/projects", ADMIN_TOKEN, json!({ "name": name }))
                        .await;
                    match answer.status {
                        201 => acknowledged
                            .lock()
                            .unwrap()
                            .push(answer.body["id"].as_str().unwrap().to_owned()),
                        503 => {
                            assert_eq!(answer.body["code"], "not_ready", "{}", answer.text);
                            refused.lock().unwrap().push(name);
                        }
                        status => panic!("{name}: {status} {}", answer.text),
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    eventually("writes acknowledged before the restart", async || {
        acknowledged.lock().unwrap().len() >= 20
    })
    .await;

    // PostgreSQL restarts, down for 2 s: every connection of every replica is closed by the
    // server, and new ones are refused meanwhile.
    let restarted = Instant::now();
    postgres.stop(StopMode::Fast).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    postgres.start().await.unwrap();
    eprintln!(
        "PostgreSQL stopped and started again in {:?}",
        restarted.elapsed()
    );
    let before = acknowledged.lock().unwrap().len();
    for (name, replica) in [("a", &a), ("b", &b)] {
        let took = within(
            &format!("{name} ready again"),
            Duration::from_secs(10),
            async || replica.get("/readyz", ADMIN_TOKEN).await.status == 200,
        )
        .await;
        eprintln!("{name} ready {took:?} after the restart");
        within(
            &format!("{name} listens to changes again"),
            Duration::from_secs(10),
            async || replica.app().changes.listening(),
        )
        .await;
    }
    one_leader_each(&a, &b).await;
    within(
        "writes acknowledged after the restart",
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
    let acknowledged = acknowledged.lock().unwrap().clone();
    eprintln!(
        "{} writes acknowledged, {} refused with 503 while PostgreSQL restarted",
        acknowledged.len(),
        refused.lock().unwrap().len()
    );
    for id in &acknowledged {
        b.get(&format!("/v1/projects/{id}"), ADMIN_TOKEN)
            .await
            .assert_status(200);
    }

    // The change feed works again: a token revoked through a is refused by b within 1 s.
    revocation_reaches_the_other(&a, &b).await;

    for replica in [a, b] {
        Arc::into_inner(replica)
            .expect("the writers ended")
            .stop()
            .await;
    }
}

/// Waits (up to 10 s) until each kind of work is led by exactly one of `a` and `b`.
pub(crate) async fn one_leader_each(a: &TestServer, b: &TestServer) {
    within(
        "every kind of work led by exactly one replica",
        Duration::from_secs(10),
        async || {
            Work::ALL
                .into_iter()
                .all(|work| a.app().leases.leads(work) != b.app().leases.leads(work))
        },
    )
    .await;
}

/// A token that `b` accepted, revoked through `a`, is refused by `b` within 1 s.
pub(crate) async fn revocation_reaches_the_other(a: &TestServer, b: &TestServer) {
    let token = a
        .post(
            "/v1/tokens",
            ADMIN_TOKEN,
            json!({ "name": "revoked-across", "scopes": ["read"] }),
        )
        .await;
    let token = token.assert_status(201).clone();
    let (id, secret) = (
        token["id"].as_str().unwrap().to_owned(),
        token["secret"].as_str().unwrap().to_owned(),
    );
    b.get("/v1/projects", &secret).await.assert_status(200);
    a.delete(&format!("/v1/tokens/{id}"), ADMIN_TOKEN)
        .await
        .assert_status(204);
    within(
        "the other replica refuses the revoked token",
        Duration::from_secs(1),
        async || b.get("/v1/projects", &secret).await.status == 401,
    )
    .await;
}
