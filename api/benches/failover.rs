//! Leader failover: `bulkhead serve` replicas (release build) on one PostgreSQL database; the
//! leader of the deploy work is killed with SIGKILL, and the time until another replica holds
//! the lease (as `GET /v1/status` on a survivor shows, polled every 10 ms) is measured; the
//! killed replica is started again before the next kill. 20 kills with 3 replicas, then 20 with
//! 5, against the bound the lease settings give (`LEASE_TTL + RENEW_EVERY`).
//!
//! Needs PostgreSQL: `BULKHEAD_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres`.
//! Run: `cargo bench -p bulkhead-api --bench failover`.

mod common;

use std::time::{Duration, Instant};

use bulkhead::app::cluster::leases::{LEASE_TTL, RENEW_EVERY};
use common::{Replica, median, percentile};
use sea_orm::{ConnectionTrait, Database};
use serde_json::Value;

const KILLS: usize = 20;
const TOKEN: &str = "bh_bench_failover_admin_token_0123456789";

fn replica_start(database_url: &str, data_dir: &std::path::Path) -> Replica {
    common::replica_start(database_url, data_dir, TOKEN, &[])
}

async fn status(http: &reqwest::Client, replica: &Replica) -> Option<Value> {
    let response = http
        .get(format!("{}/v1/status", replica.base))
        .bearer_auth(TOKEN)
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .ok()?;
    response.json().await.ok()
}

fn deploys_leader(status: &Value) -> Option<String> {
    status["leaders"]
        .as_array()?
        .iter()
        .find(|l| l["work"] == "deploys" && l["current"] == true)
        .and_then(|l| l["holder"].as_str().map(str::to_owned))
}

async fn run(admin_url: &str, replicas: usize) -> Vec<Duration> {
    let name = format!("bulkhead_bench_failover_{}", uuid::Uuid::new_v4().simple());
    let admin = Database::connect(admin_url)
        .await
        .expect("PostgreSQL answers");
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let mut url = reqwest::Url::parse(admin_url).unwrap();
    url.set_path(&name);
    let url = url.to_string();
    let dir = tempfile::tempdir().unwrap();
    let http = common::http();
    // The first replica migrates; the others start on a migrated database.
    let mut running: Vec<(Replica, std::path::PathBuf)> = Vec::new();
    for i in 0..replicas {
        let data = dir.path().join(format!("replica-{i}"));
        running.push((replica_start(&url, &data), data));
    }
    // Each replica's id, by its position.
    let mut ids: Vec<String> = Vec::new();
    for (replica, _) in &running {
        let seen = status(&http, replica).await.expect("status answers");
        ids.push(seen["replica"].as_str().unwrap().to_owned());
    }
    let mut samples = Vec::new();
    for _ in 0..KILLS {
        let leader = loop {
            if let Some(leader) = status(&http, &running[0].0)
                .await
                .as_ref()
                .and_then(deploys_leader)
            {
                break leader;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let position = ids
            .iter()
            .position(|id| *id == leader)
            .expect("a known replica");
        let survivor = (position + 1) % replicas;
        running[position].0.child.kill().unwrap();
        let killed = Instant::now();
        running[position].0.child.wait().unwrap();
        loop {
            if let Some(holder) = status(&http, &running[survivor].0)
                .await
                .as_ref()
                .and_then(deploys_leader)
                && holder != leader
            {
                break;
            }
            assert!(killed.elapsed() < Duration::from_secs(30), "no new leader");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        samples.push(killed.elapsed());
        let data = running[position].1.clone();
        running[position].0 = replica_start(&url, &data);
        let seen = status(&http, &running[position].0).await.expect("status");
        ids[position] = seen["replica"].as_str().unwrap().to_owned();
    }
    for (mut replica, _) in running {
        replica.child.kill().ok();
        replica.child.wait().ok();
    }
    admin
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .ok();
    samples
}

#[tokio::main]
async fn main() {
    let Some(admin_url) = std::env::var("BULKHEAD_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        eprintln!("set BULKHEAD_TEST_POSTGRES_URL (replicas share a PostgreSQL database)");
        std::process::exit(2);
    };
    let bound = LEASE_TTL + RENEW_EVERY;
    println!("leader failover after SIGKILL, {KILLS} kills; bound {bound:?}");
    println!("| replicas | median | p90 | max | median / bound | max / bound |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for replicas in [3, 5] {
        let samples = run(&admin_url, replicas).await;
        let med = median(samples.clone());
        let p90 = percentile(samples.clone(), 90.0);
        let max = *samples.iter().max().unwrap();
        println!(
            "| {replicas} | {:.2} s | {:.2} s | {:.2} s | {:.2} | {:.2} |",
            med.as_secs_f64(),
            p90.as_secs_f64(),
            max.as_secs_f64(),
            med.as_secs_f64() / bound.as_secs_f64(),
            max.as_secs_f64() / bound.as_secs_f64(),
        );
    }
}
