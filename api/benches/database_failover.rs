//! The database failing over: `bulkhead serve` replicas (release build) given a PostgreSQL
//! primary and its standby (two servers made here, `bulkhead::dev::postgres`).
//!
//! 1. **Failover**: 8 clients write (`POST /v1/projects`, each bound to one replica in turn,
//!    a write refused is counted and the next one sent); the primary is stopped as a crash would
//!    and the standby promoted 2 s later (a failover manager's delay). Measured: the time from
//!    the promotion to the first acknowledged write, the writes that failed (and how: 503 or
//!    anything else), and the time the writes stopped for. With 1 and 3 replicas, 3 runs each.
//! 2. **The price of losing nothing**: write throughput through one replica with synchronous
//!    replication (a commit waits until the standby has it on disk) beside asynchronous, at 16
//!    and 64 clients, 10 s each, on the same machine (a round trip of microseconds: across
//!    clouds each commit adds that round trip).
//!
//! Needs PostgreSQL's server programs (`apt-get install postgresql`).
//! Run: `cargo bench -p bulkhead-api --bench database_failover`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulkhead::dev::postgres::{ReplicatedPostgres, Replication};
use common::{Replica, median};

const TOKEN: &str = "bh_bench_dbfailover_admin_token_0123456789";
const WRITERS: usize = 8;
const RUNS: usize = 3;
const PROMOTE_AFTER: Duration = Duration::from_secs(2);
const THROUGHPUT_SECS: u64 = 10;

fn replica_start(database_url: &str, data_dir: &std::path::Path) -> Replica {
    common::replica_start(
        database_url,
        data_dir,
        TOKEN,
        &[("BULKHEAD_LIMITS", "projects_per_user=10000000")],
    )
}

/// One write: when it was answered, and its status (0: no answer).
type Answer = (Instant, u16);

/// `clients` writers through `replicas` (client n on replica n mod len) until `stop`.
fn writers_start(
    replicas: &[String],
    clients: usize,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Vec<Answer>>>, Vec<tokio::task::JoinHandle<()>>) {
    let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
    let tasks = (0..clients)
        .map(|n| {
            let base = replicas[n % replicas.len()].clone();
            let (answers, stop) = (answers.clone(), stop.clone());
            tokio::spawn(async move {
                let http = common::http();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let status = http
                        .post(format!("{base}/v1/projects"))
                        .bearer_auth(TOKEN)
                        .json(&serde_json::json!({ "name": format!("c{n}-{i}") }))
                        .timeout(Duration::from_secs(30))
                        .send()
                        .await
                        .map_or(0, |response| response.status().as_u16());
                    answers.lock().unwrap().push((Instant::now(), status));
                    if status != 201 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            })
        })
        .collect();
    (answers, tasks)
}

struct FailoverRun {
    first_write: Duration,
    /// The longest time between two acknowledged writes around the failover.
    stopped_for: Duration,
    failed_503: usize,
    failed_other: usize,
    writes: usize,
}

async fn failover_run(replica_count: usize) -> FailoverRun {
    let dir = tempfile::tempdir().unwrap();
    let postgres = ReplicatedPostgres::start(&dir.path().join("db"), Replication::Synchronous)
        .await
        .expect("PostgreSQL's server programs (apt-get install postgresql)");
    let replicas: Vec<Replica> = (0..replica_count)
        .map(|i| replica_start(&postgres.url(), &dir.path().join(format!("replica-{i}"))))
        .collect();
    let bases: Vec<String> = replicas.iter().map(|r| r.base.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (answers, tasks) = writers_start(&bases, WRITERS, stop.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    postgres.primary_kill().await.unwrap();
    let killed = Instant::now();
    tokio::time::sleep(PROMOTE_AFTER).await;
    postgres.standby_promote().await.unwrap();
    let promoted = Instant::now();
    // Writes go on for 10 s after the promotion.
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let answers = answers.lock().unwrap().clone();
    let first_write = answers
        .iter()
        .filter(|(at, status)| *status == 201 && *at > promoted)
        .map(|(at, _)| *at - promoted)
        .min()
        .expect("writes after the promotion");
    let mut acknowledged: Vec<Instant> = answers
        .iter()
        .filter(|(_, status)| *status == 201)
        .map(|(at, _)| *at)
        .collect();
    acknowledged.sort();
    let stopped_for = acknowledged
        .windows(2)
        .filter(|pair| pair[1] > killed)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default();
    let failed = |wanted: fn(u16) -> bool| {
        answers
            .iter()
            .filter(|(at, status)| *at > killed && *status != 201 && wanted(*status))
            .count()
    };
    FailoverRun {
        first_write,
        stopped_for,
        failed_503: failed(|status| status == 503),
        failed_other: failed(|status| status != 503),
        writes: answers.iter().filter(|(at, _)| *at > killed).count(),
    }
}

/// Acknowledged writes a second through one replica, `clients` at once.
async fn throughput(replication: Replication, clients: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let postgres = ReplicatedPostgres::start(&dir.path().join("db"), replication)
        .await
        .expect("PostgreSQL's server programs (apt-get install postgresql)");
    let replica = replica_start(&postgres.url(), &dir.path().join("replica"));
    // Warm up.
    let stop = Arc::new(AtomicBool::new(false));
    let (_, tasks) = writers_start(std::slice::from_ref(&replica.base), clients, stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (answers, tasks) =
        writers_start(std::slice::from_ref(&replica.base), clients, stop.clone());
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(THROUGHPUT_SECS)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    for task in tasks {
        task.await.unwrap();
    }
    let acknowledged = answers
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, status)| *status == 201)
        .count();
    acknowledged as f64 / elapsed.as_secs_f64()
}

#[tokio::main]
async fn main() {
    println!(
        "machine: {} cores; date: {}",
        std::thread::available_parallelism().unwrap(),
        chrono::Utc::now().format("%Y-%m-%d")
    );
    println!(
        "\nfailover: primary killed, standby promoted {} s later, {WRITERS} writers, {RUNS} runs",
        PROMOTE_AFTER.as_secs()
    );
    println!(
        "| replicas | promotion → first write, median (max) | writes stopped for, median (max) | failed: 503 / other (of writes) |"
    );
    println!("| ---: | ---: | ---: | ---: |");
    for replicas in [1, 3] {
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            runs.push(failover_run(replicas).await);
        }
        let first: Vec<Duration> = runs.iter().map(|r| r.first_write).collect();
        let stopped: Vec<Duration> = runs.iter().map(|r| r.stopped_for).collect();
        println!(
            "| {replicas} | {:.0} ms ({:.0} ms) | {:.2} s ({:.2} s) | {} / {} (of {}) |",
            median(first.clone()).as_secs_f64() * 1000.0,
            first.iter().max().unwrap().as_secs_f64() * 1000.0,
            median(stopped.clone()).as_secs_f64(),
            stopped.iter().max().unwrap().as_secs_f64(),
            runs.iter().map(|r| r.failed_503).sum::<usize>(),
            runs.iter().map(|r| r.failed_other).sum::<usize>(),
            runs.iter().map(|r| r.writes).sum::<usize>(),
        );
    }
    println!("\nwrites/s through one replica, synchronous against asynchronous replication");
    println!("| clients | asynchronous | synchronous | synchronous / asynchronous |");
    println!("| ---: | ---: | ---: | ---: |");
    for clients in [16, 64] {
        let asynchronous = throughput(Replication::Asynchronous, clients).await;
        let synchronous = throughput(Replication::Synchronous, clients).await;
        println!(
            "| {clients} | {asynchronous:.0} | {synchronous:.0} | {:.2} |",
            synchronous / asynchronous
        );
    }
}
