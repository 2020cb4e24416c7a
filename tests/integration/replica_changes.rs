//! Changes made through one replica take effect on the others at once (PostgreSQL's
//! LISTEN/NOTIFY as the hint, each replica re-reading what changed): a revoked token is
//! refused everywhere within a second, deployment events reach streams on other replicas,
//! the routing leader publishes a change made elsewhere and every replica serves the same
//! bytes for it, an activated plugin serves everywhere, a provider found down by one replica
//! is refused by the others. And a replica cut off from the database says it is not ready,
//! gives its work up, and recovers without a restart when the database comes back.
//!
//! SQLite has no change feed (one process per file in production): these run on PostgreSQL
//! only, and are skipped, saying so, without `BULKHEAD_TEST_POSTGRES_URL`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkhead::app::cluster::leases::Work;
use bulkhead_simulators::faults::FaultState;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::clouds::fault_set;
use crate::deployments::deploy;
use crate::providers::{example_variant, probe_digest, provider_with, upload};
use crate::replicas::{first_replica_with_a_service, replica_id};
use crate::support::{
    ADMIN_TOKEN, Backend, TestServer, database_fresh, eventually, provider_probe,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_through_one_replica_take_effect_on_the_others() {
    changes_take_effect_on_the_others(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_the_database_gives_its_work_up_and_recovers() {
    cut_off_and_recovered(Backend::Postgres).await;
}

/// Polls `check` every 10 ms until it holds; how long that took, failing after `bound`.
pub(crate) async fn within<F: AsyncFn() -> bool>(
    what: &str,
    bound: Duration,
    check: F,
) -> Duration {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// The routing table as `s` serves it: its revision, ETag and bytes.
async fn routing_table(s: &TestServer) -> (i64, String, Vec<u8>) {
    let response = s
        .http
        .get(s.url("/v1/routing-table"))
        .bearer_auth(ADMIN_TOKEN)
        .header("accept-encoding", "identity")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    let bytes = response.bytes().await.unwrap().to_vec();
    let document: Value = serde_json::from_slice(&bytes).unwrap();
    let revision = document["table"]["revision"]
        .as_i64()
        .unwrap_or_else(|| panic!("no revision in {document}"));
    (revision, etag, bytes)
}

/// Reads the event stream at `url` on `s` until it ends; for each event, how long after its
/// `created_at` it arrived.
async fn stream_lags(s: &TestServer, url: &str) -> Vec<(String, Duration)> {
    let mut response = s
        .http
        .get(s.url(url))
        .bearer_auth(ADMIN_TOKEN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut lags = Vec::new();
    let mut buffer = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let chunk = tokio::time::timeout_at(deadline.into(), response.chunk())
            .await
            .expect("the stream goes on");
        let Some(chunk) = chunk.unwrap() else {
            return lags;
        };
        let arrived = Utc::now();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let Some(data) = frame.lines().find_map(|line| line.strip_prefix("data:")) else {
                continue;
            };
            let event: Value = serde_json::from_str(data.trim()).unwrap();
            let Some(created) = event["created_at"].as_str() else {
                continue;
            };
            let created: DateTime<Utc> = created.parse().unwrap();
            let lag = (arrived - created).to_std().unwrap_or_default();
            lags.push((event["kind"].as_str().unwrap().to_owned(), lag));
        }
    }
}

/// The digest of the plugin `s` serves for `provider` now.
fn serving(s: &TestServer, provider: &str) -> Option<String> {
    s.app()
        .providers
        .active(provider)
        .map(|active| active.plugin.digest.clone())
}

/// `{ids}` of `path` (the last segment).
fn last_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap()
}

async fn changes_take_effect_on_the_others(backend: Backend) {
    let Some((url, _dir, a, platform, f)) = first_replica_with_a_service(backend).await else {
        return;
    };
    let (b, c) = tokio::join!(
        TestServer::replica_start(backend, &url),
        TestServer::replica_start(backend, &url),
    );
    // `a` started first and leads every kind of work.
    for work in Work::ALL {
        assert!(a.app().leases.leads(work), "{work:?}");
    }

    // A token used on b and c (so that they cache it), revoked through a: refused by both
    // within a second (without the feed, they would honour it for the cache's 5 s).
    let minted = a
        .post(
            "/v1/tokens",
            ADMIN_TOKEN,
            json!({ "name": "short-lived", "scopes": ["read"] }),
        )
        .await;
    let minted = minted.assert_status(201).clone();
    let secret = minted["secret"].as_str().unwrap().to_owned();
    for s in [&b, &c] {
        s.get("/v1/projects", &secret).await.assert_status(200);
    }
    a.delete(
        &format!("/v1/tokens/{}", minted["id"].as_str().unwrap()),
        ADMIN_TOKEN,
    )
    .await
    .assert_status(204);
    for s in [&b, &c] {
        let took = within(
            "the revoked token refused",
            Duration::from_secs(1),
            async || s.get("/v1/projects", &secret).await.status == 401,
        )
        .await;
        eprintln!("revocation honoured by {} after {took:?}", replica_id(s));
    }

    // A deployment made through c (the leader a is woken by the hint) and streamed from b:
    // each event reaches b's stream promptly (b's own poll would take up to a second).
    let made = deploy(&c, &f.owner, &f.service).await;
    let id = made["id"].as_str().unwrap();
    let lags = stream_lags(&b, &format!("{}/deployments/{id}/events", f.service)).await;
    assert!(
        lags.iter().any(|(kind, _)| kind == "deployment.healthy"),
        "{lags:?}"
    );
    let mut sorted: Vec<Duration> = lags.iter().map(|(_, lag)| *lag).collect();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    eprintln!("events on another replica: median lag {median:?}, all {lags:?}");
    assert!(
        median < Duration::from_millis(300),
        "events reach other replicas' streams by the hint, not the poll: {lags:?}"
    );

    // A domain added through c: the routing leader (a) publishes it at once, and every
    // replica serves the revision with the same bytes and ETag.
    let before = routing_table(&a).await.0;
    let project = &f.project;
    crate::support::domain_bind(
        &c,
        &f.owner,
        project,
        last_segment(&f.service),
        "shared.example.com",
    )
    .await;
    let took = within(
        "every replica serves the new revision",
        Duration::from_secs(2),
        async || {
            let mut served = Vec::new();
            for s in [&a, &b, &c] {
                served.push(routing_table(s).await);
            }
            served[0].0 > before && served.iter().all(|t| t == &served[0])
        },
    )
    .await;
    eprintln!("a domain added on a follower was served by every replica after {took:?}");
    let (_, _, bytes) = routing_table(&b).await;
    assert!(String::from_utf8_lossy(&bytes).contains("shared.example.com"));

    // A plugin activated through a serves on b and c at once.
    let first = upload(&a, ADMIN_TOKEN, example_variant("first")).await;
    let first = first.assert_status(201)["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = upload(&a, ADMIN_TOKEN, example_variant("second")).await;
    let second = second.assert_status(201)["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    provider_with(&a, "edge", &first).await;
    // Loading a binary a replica has not run before includes compiling it (seconds in a
    // debug build on a busy machine); one it ran before loads from its compiled cache.
    let compiling = Duration::from_secs(5);
    for s in [&b, &c] {
        within("the new provider serves", compiling, async || {
            serving(s, "edge").as_ref() == Some(&first)
        })
        .await;
        assert_eq!(probe_digest(s, "edge").await, first);
    }
    a.post(
        "/v1/providers/edge/activate",
        ADMIN_TOKEN,
        json!({ "digest": second }),
    )
    .await
    .assert_status(200);
    for s in [&b, &c] {
        let took = within("the activated version serves", compiling, async || {
            serving(s, "edge").as_ref() == Some(&second)
        })
        .await;
        eprintln!(
            "activation (a new binary) served by {} after {took:?}",
            replica_id(s)
        );
        assert_eq!(probe_digest(s, "edge").await, second);
    }
    // A rollback to a version each replica ran before: the change itself, within a second
    // (the periodic sync alone would take up to 10 s).
    a.post("/v1/providers/edge/rollback", ADMIN_TOKEN, json!({}))
        .await
        .assert_status(200);
    for s in [&b, &c] {
        let took = within("the rollback serves", Duration::from_secs(1), async || {
            serving(s, "edge").as_ref() == Some(&first)
        })
        .await;
        eprintln!("rollback served by {} after {took:?}", replica_id(s));
    }

    // The cloud suspends the account; a's probe finds it. b, which has not called gcp since,
    // refuses calls to it at once, saying why.
    fault_set(
        &platform.0.gcp.url(),
        FaultState {
            suspended: true,
            ..Default::default()
        },
    )
    .await;
    let probe = provider_probe(&a, "gcp").await;
    assert_eq!(
        probe.assert_status(200)["status"],
        "unavailable",
        "{}",
        probe.text
    );
    within("b refuses calls to gcp", Duration::from_secs(1), async || {
        let refused = b
            .post(
                "/v1/providers/gcp/instances",
                ADMIN_TOKEN,
                json!({ "instance_key": "web-refused", "region": "us-central1", "artifact": "shop/web:1", "port": 8080 }),
            )
            .await;
        refused.status == 503 && refused.text.contains("provider_unavailable")
    })
    .await;
    for s in [a, b, c] {
        s.stop().await;
    }
}

/// A TCP relay between replicas and the database that can be cut (every connection reset,
/// new ones refused: the database unreachable, or restarting) and restored.
struct Relay {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let accepting = tokio::spawn({
            let (open, connections) = (open.clone(), connections.clone());
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !open.load(Ordering::Acquire) {
                        continue;
                    }
                    let upstream = upstream.clone();
                    let relayed = tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    connections.lock().unwrap().push(relayed.abort_handle());
                }
            }
        });
        Self {
            addr,
            open,
            connections,
            accepting,
        }
    }

    /// `url` with its host and port replaced by the relay's.
    fn url_through(&self, url: &str) -> String {
        let mut through = reqwest::Url::parse(url).unwrap();
        through.set_host(Some("127.0.0.1")).unwrap();
        through.set_port(Some(self.addr.port())).unwrap();
        through.to_string()
    }

    fn cut(&self) {
        self.open.store(false, Ordering::Release);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::Release);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accepting.abort();
        self.cut();
    }
}

async fn cut_off_and_recovered(backend: Backend) {
    let Some((url, _dir)) = database_fresh(backend).await else {
        return;
    };
    let parsed = reqwest::Url::parse(&url).unwrap();
    let relay = Relay::start(format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(5432)
    ))
    .await;
    // b reaches the database through the relay, and starts first: it leads everything.
    let b = TestServer::replica_start(backend, &relay.url_through(&url)).await;
    let a = TestServer::replica_start(backend, &url).await;
    for work in Work::ALL {
        assert!(b.app().leases.leads(work), "{work:?}");
    }
    let first = upload(&a, ADMIN_TOKEN, example_variant("before")).await;
    let first = first.assert_status(201)["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    provider_with(&a, "edge", &first).await;

    // Cut off (as when the database restarts, or the network to it fails): b says it is not
    // ready, and stops acting on every kind of work before a takes them over.
    relay.cut();
    let cut = Instant::now();
    eventually("b is not ready", async || {
        b.get("/readyz", ADMIN_TOKEN).await.status == 503
    })
    .await;
    for work in Work::ALL {
        let stopped = within("b stops leading", Duration::from_secs(3), async || {
            !b.app().leases.leads(work)
        })
        .await;
        assert!(
            stopped <= bulkhead::app::cluster::leases::LEASE_TTL,
            "{work:?} acted on {stopped:?} after the cut"
        );
    }
    within(
        "a takes every kind of work",
        Duration::from_secs(5),
        async || Work::ALL.into_iter().all(|work| a.app().leases.leads(work)),
    )
    .await;
    eprintln!("a leads everything {:?} after the cut", cut.elapsed());
    // The API goes on through a; b answers that it cannot reach the database (503 and
    // `Retry-After`, so that a client or balancer tries another replica), never a 500.
    a.get("/v1/projects", ADMIN_TOKEN).await.assert_status(200);
    let cut_off = b.get("/v1/projects", ADMIN_TOKEN).await;
    cut_off.assert_problem(503, "not_ready");
    assert!(cut_off.header("retry-after").is_some(), "{}", cut_off.text);
    // An activation made now is not heard by b.
    let second = upload(&a, ADMIN_TOKEN, example_variant("after")).await;
    let second = second.assert_status(201)["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    a.post(
        "/v1/providers/edge/activate",
        ADMIN_TOKEN,
        json!({ "digest": second }),
    )
    .await
    .assert_status(200);

    // Back: b recovers on its own, listens to changes again, and resyncs what it missed.
    relay.restore();
    eventually("b is ready again", async || {
        b.get("/readyz", ADMIN_TOKEN).await.status == 200
    })
    .await;
    eventually("b listens to changes again", async || {
        b.app().changes.listening()
    })
    .await;
    within(
        "b serves what was activated while it was cut off",
        // A binary b has not run: loading it includes compiling it.
        Duration::from_secs(5),
        async || serving(&b, "edge").as_ref() == Some(&second),
    )
    .await;
    // And hears the next change at once.
    a.post("/v1/providers/edge/rollback", ADMIN_TOKEN, json!({}))
        .await
        .assert_status(200);
    within(
        "b serves the rollback",
        Duration::from_secs(1),
        async || serving(&b, "edge").as_ref() == Some(&first),
    )
    .await;
    assert_eq!(b.get("/v1/projects", ADMIN_TOKEN).await.status, 200);
    a.stop().await;
    b.stop().await;
}
