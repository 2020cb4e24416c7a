//! The deploy pipeline survives crashes: the real `bulkhead` binary is killed with SIGKILL
//! mid-provision, mid-health-check and mid-removal, restarted on the same database, and each
//! time the deployment completes with exactly the desired instances, at the providers as in
//! the database: none duplicated, none orphaned.

use std::time::{Duration, Instant};

use serde_json::json;

use bulkhead::dev::DevPlatform;
use bulkhead_simulators::faults::FaultState;

use crate::support::{Backend, ChildServer, database_fresh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_deployment_sqlite() {
    killed_mid_deployment(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_deployment_postgres() {
    if std::env::var("BULKHEAD_TEST_POSTGRES_URL").is_err() {
        crate::support::postgres_skipped();
        return;
    }
    killed_mid_deployment(Backend::Postgres).await;
}

/// Polls until an instance of the service is in `state`.
async fn instance_in_state(server: &ChildServer, service: &str, state: &str) {
    let started = Instant::now();
    loop {
        let instances = server.get(&format!("{service}/instances")).await;
        if instances["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["state"] == state)
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no instance became {state}: {instances:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for a deployment to be healthy and its service to have exactly `replicas` live
/// instances, all running, each held by its provider; and no provider to hold any other.
async fn converged(server: &ChildServer, service: &str, deployment: &str, replicas: usize) {
    let started = Instant::now();
    loop {
        let view = server
            .get(&format!("{service}/deployments/{deployment}"))
            .await;
        let live = server.get(&format!("{service}/instances")).await["items"]
            .as_array()
            .unwrap()
            .clone();
        let held = held_keys(server).await;
        let mut wanted: Vec<String> = live
            .iter()
            .map(|i| i["instance_key"].as_str().unwrap().to_owned())
            .collect();
        wanted.sort();
        let done = view["state"] == "healthy"
            && live.len() == replicas
            && live
                .iter()
                .all(|i| i["state"] == "running" && i["health"] == "healthy")
            && held == wanted;
        if done {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "not converged: deployment {}, live {wanted:?}, held by the providers {held:?}: {view:#}",
            view["state"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Keys of the instances the providers hold (as their plugins list them), sorted, each as
/// often as it is held: two instances under one key count twice.
async fn held_keys(server: &ChildServer) -> Vec<String> {
    let mut keys = Vec::new();
    for provider in ["gcp", "aws", "metal"] {
        let (status, list) = server
            .call(
                reqwest::Method::GET,
                &format!("/v1/providers/{provider}/instances"),
                None,
            )
            .await;
        if status != 200 {
            // A provider not serving yet right after a restart: try again later.
            keys.push(format!("<{provider} unavailable>"));
            continue;
        }
        for instance in list["items"].as_array().unwrap() {
            if instance["state"] != "stopped" {
                keys.push(instance["instance_key"].as_str().unwrap().to_owned());
            }
        }
    }
    keys.sort();
    keys
}

/// The state of a deployment and how many instances it has, read from the database itself
/// (with the server killed, nothing else answers).
async fn deployment_in_database(database_url: &str, id: &str) -> (String, u64) {
    use bulkhead::entity::{deployment, instance};
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
    let db = bulkhead::db::connect(database_url).await.unwrap();
    let id: uuid::Uuid = id.parse().unwrap();
    let found = deployment::Entity::find_by_id(id)
        .one(&db)
        .await
        .unwrap()
        .expect("the deployment is stored");
    let instances = instance::Entity::find()
        .filter(instance::Column::DeploymentId.eq(id))
        .count(&db)
        .await
        .unwrap();
    db.close().await.unwrap();
    (found.state.to_string(), instances)
}

async fn deploy(server: &ChildServer, service: &str) -> String {
    let (status, made) = server
        .call(
            reqwest::Method::POST,
            &format!("{service}/deployments"),
            None,
        )
        .await;
    assert_eq!(status, 201, "{made}");
    made["id"].as_str().unwrap().to_owned()
}

async fn killed_mid_deployment(backend: Backend) {
    let (database_url, dir) = database_fresh(backend).await.unwrap();
    let data_dir = dir.path().join("data");
    let platform_dir = tempfile::tempdir().unwrap();
    let platform = DevPlatform::start(platform_dir.path()).await.unwrap();
    let mut server = ChildServer::start(&database_url, &data_dir);
    for (name, update) in platform.provider_updates() {
        let (status, body) = server
            .call(
                reqwest::Method::PATCH,
                &format!("/v1/providers/{name}"),
                Some(serde_json::to_value(update).unwrap()),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (_, project) = server
        .call(
            reqwest::Method::POST,
            "/v1/projects",
            Some(json!({ "name": "crashes" })),
        )
        .await;
    let project = project["id"].as_str().unwrap().to_owned();
    let (_, environment) = server
        .call(
            reqwest::Method::POST,
            &format!("/v1/projects/{project}/environments"),
            Some(json!({ "name": "production" })),
        )
        .await;
    let (status, service) = server
        .call(
            reqwest::Method::POST,
            &format!("/v1/projects/{project}/services"),
            Some(json!({
                "environment_id": environment["id"],
                "name": "web",
                "source": { "type": "command", "command": ["python3", "-m", "http.server", "$PORT"] },
                "port": 8080,
                "replicas": 3,
                "placement": { "providers": [{ "name": "gcp" }, { "name": "aws" }, { "name": "metal" }] },
                // Three passes a second apart: instances stay a while in `starting`.
                "health_check": { "interval_ms": 700, "healthy_threshold": 3, "start_timeout_secs": 60 },
            })),
        )
        .await;
    assert_eq!(status, 201, "{service}");
    let service = format!(
        "/v1/projects/{project}/services/{}",
        service["id"].as_str().unwrap()
    );
    // Slow clouds: every provider call takes a while, so that a kill lands mid-call.
    let slow = FaultState {
        latency_ms: 1200,
        ..FaultState::default()
    };
    platform.gcp.faults.set(slow.clone());
    platform.aws.faults.set(slow.clone());

    // 1. Killed while instances are being provisioned.
    let first = deploy(&server, &service).await;
    instance_in_state(&server, &service, "provisioning").await;
    server.kill();
    server = ChildServer::start(&database_url, &data_dir);
    // 2. Killed while instances are being checked before they serve.
    instance_in_state(&server, &service, "starting").await;
    server.kill();
    server = ChildServer::start(&database_url, &data_dir);
    converged(&server, &service, &first, 3).await;

    // 3. Killed while the old instances are being removed (a new version with one replica).
    let (status, _) = server
        .call(
            reqwest::Method::PATCH,
            &service,
            Some(json!({ "replicas": 1, "health_check": { "interval_ms": 200 } })),
        )
        .await;
    assert_eq!(status, 200);
    let second = deploy(&server, &service).await;
    instance_in_state(&server, &service, "removing").await;
    server.kill();
    server = ChildServer::start(&database_url, &data_dir);
    converged(&server, &service, &second, 1).await;

    // 4. Killed right after a deployment is queued, before anything was placed: the pipeline
    // is paused so that nothing is, and the database says so at the kill.
    let (status, body) = server
        .call(
            reqwest::Method::POST,
            "/v1/deploy-pipeline/pause",
            Some(json!({ "reason": "crash test" })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let third = deploy(&server, &service).await;
    server.kill();
    assert_eq!(
        deployment_in_database(&database_url, &third).await,
        ("queued".to_owned(), 0),
        "killed with the deployment queued and nothing placed"
    );
    server = ChildServer::start(&database_url, &data_dir);
    let (status, body) = server
        .call(reqwest::Method::POST, "/v1/deploy-pipeline/resume", None)
        .await;
    assert_eq!(status, 200, "{body}");
    converged(&server, &service, &third, 1).await;
    server.kill();
    platform.shutdown().await;
}
