//! What the benchmarks share: the local platform with a server (release build) whose bundled
//! providers point at it, the `gcp` plugin's provider calls made natively to the simulator (the
//! baseline of "the same calls without Bulkhead"), and statistics.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use bulkhead::config::{ServeArgs, Settings};
use bulkhead::dev::{DevPlatform, GCP_PROJECT, GCP_ZONE};
use bulkhead::server::RunningServer;
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};

pub const TOKEN: &str = "benchmark-admin-token-0001";

/// The local platform, and a server on SQLite in `dir` (or on `settings.database_url` as
/// `adjust` sets it) whose bundled providers point at the platform.
pub async fn platform_and_server(
    dir: &Path,
    adjust: impl FnOnce(&mut Settings),
) -> (DevPlatform, RunningServer) {
    let platform = DevPlatform::start(dir).await.unwrap();
    let server = server_start(dir, &platform, adjust).await;
    (platform, server)
}

/// Another server (its own data directory under `dir`) pointed at `platform`.
pub async fn server_start(
    dir: &Path,
    platform: &DevPlatform,
    adjust: impl FnOnce(&mut Settings),
) -> RunningServer {
    // SAFETY: set before any other thread of this program reads the environment.
    unsafe { std::env::set_var("BULKHEAD_BOOTSTRAP_TOKEN", TOKEN) };
    let data_dir = dir.join(format!("server-{}", uuid::Uuid::new_v4().simple()));
    let mut settings = Settings::resolve(ServeArgs {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        data_dir: Some(data_dir.clone()),
        ..Default::default()
    })
    .unwrap();
    settings.bundled_plugins = bulkhead_commands::bundled_plugins();
    // A backlog of thousands of services in one project, past what one tenant may hold.
    settings.limits.services_per_project = 1_000_000;
    // A thousand watchers from this one address, past what one client address may open.
    settings.connections.max_per_address = 100_000;
    adjust(&mut settings);
    std::fs::create_dir_all(&data_dir).unwrap();
    let server = bulkhead::server::start(settings).await.unwrap();
    platform.providers_configure(&server.app).await.unwrap();
    server
}

/// A fresh PostgreSQL database for a benchmark, if `BULKHEAD_TEST_POSTGRES_URL` names a server.
pub async fn postgres_database() -> Option<String> {
    let admin_url = std::env::var("BULKHEAD_TEST_POSTGRES_URL").ok()?;
    let name = format!("bulkhead_bench_{}", uuid::Uuid::new_v4().simple());
    let admin = Database::connect(&admin_url).await.unwrap();
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    admin.close().await.unwrap();
    let mut url = reqwest::Url::parse(&admin_url).unwrap();
    url.set_path(&name);
    Some(url.to_string())
}

pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The plugin's provision, natively: RS256 assertion, token exchange, insert, get.
pub async fn provision_raw(http: &reqwest::Client, platform: &DevPlatform, key: &str) {
    let bearer = token_exchange(http, platform).await;
    insert_and_get(http, platform, &bearer, key).await;
}

/// An RS256 assertion exchanged for an access token.
pub async fn token_exchange(http: &reqwest::Client, platform: &DevPlatform) -> String {
    let (email, private_key) = platform.gcp_service_account();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({ "iss": email, "scope": "https://www.googleapis.com/auth/compute",
        "aud": platform.gcp.token_url(), "iat": now, "exp": now + 3600 });
    let assertion = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_rsa_pem(private_key.as_bytes()).unwrap(),
    )
    .unwrap();
    let token: Value = http
        .post(platform.gcp.token_url())
        .form(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("assertion", assertion.as_str()),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    token["access_token"].as_str().unwrap().to_owned()
}

/// Insert the instance and read it back, with a token.
pub async fn insert_and_get(
    http: &reqwest::Client,
    platform: &DevPlatform,
    bearer: &str,
    key: &str,
) {
    let zone_url = format!(
        "{}/compute/v1/projects/{GCP_PROJECT}/zones/{GCP_ZONE}",
        platform.gcp.url()
    );
    let body = json!({
        "name": key, "machineType": format!("zones/{GCP_ZONE}/machineTypes/e2-small"),
        "labels": { "bulkhead-key": key, "bulkhead-managed": "true" },
        "metadata": { "items": [{ "key": "bulkhead-port", "value": "8080" }, { "key": "bulkhead-artifact", "value": "shop/web:1" }] },
        "disks": [{ "boot": true, "autoDelete": true, "initializeParams": { "sourceImage": "projects/cos-cloud/global/images/family/cos-stable" } }],
        "networkInterfaces": [{ "network": "global/networks/default" }],
    });
    let inserted = http
        .post(format!("{zone_url}/instances"))
        .bearer_auth(bearer)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        inserted.status().is_success(),
        "{}",
        inserted.text().await.unwrap()
    );
    let got = http
        .get(format!("{zone_url}/instances/{key}"))
        .bearer_auth(bearer)
        .send()
        .await
        .unwrap();
    assert!(got.status().is_success());
}

/// The `p`-th percentile (0 to 100) of `samples`, nearest rank.
pub fn percentile(mut samples: Vec<Duration>, p: f64) -> Duration {
    samples.sort();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// The API of a benchmarked server, called with [`TOKEN`].
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
}

impl Api {
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{method} {path}: {status} {body}");
        body
    }

    /// A project and environment; returns `/v1/projects/{p}` and the environment id.
    pub async fn project(&self) -> (String, Value) {
        let project = self
            .call(
                reqwest::Method::POST,
                "/v1/projects",
                Some(json!({ "name": format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]) })),
            )
            .await;
        let project = format!("/v1/projects/{}", project["id"].as_str().unwrap());
        let environment = self
            .call(
                reqwest::Method::POST,
                &format!("{project}/environments"),
                Some(json!({ "name": "production" })),
            )
            .await;
        (project, environment["id"].clone())
    }

    pub async fn service(&self, project: &str, environment: &Value, spec: Value) -> String {
        let mut body = spec;
        body["environment_id"] = environment.clone();
        let made = self
            .call(
                reqwest::Method::POST,
                &format!("{project}/services"),
                Some(body),
            )
            .await;
        format!("{project}/services/{}", made["id"].as_str().unwrap())
    }

    pub async fn deploy(&self, service: &str) -> String {
        let made = self
            .call(
                reqwest::Method::POST,
                &format!("{service}/deployments"),
                None,
            )
            .await;
        made["id"].as_str().unwrap().to_owned()
    }

    /// Reads the deployment's event stream until `deployment.healthy`.
    pub async fn healthy_wait(&self, service: &str, id: &str) {
        let mut response = self
            .http
            .get(format!("{}{service}/deployments/{id}/events", self.base))
            .bearer_auth(TOKEN)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        let mut seen = String::new();
        while let Some(chunk) = response.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("event: deployment.healthy") {
                return;
            }
            assert!(!seen.contains("event: deployment.failed"), "{seen}");
        }
        panic!("the stream ended before the deployment was healthy: {seen}");
    }
}

/// A plain HTTP client (reqwest's TLS is configured by bulkhead-common, so its crypto provider
/// must be installed before a client is built).
#[allow(dead_code)]
pub fn http() -> reqwest::Client {
    http_builder().build().expect("a client builds")
}

#[allow(dead_code)]
pub fn http_builder() -> reqwest::ClientBuilder {
    bulkhead_common::tls::crypto_provider_install();
    reqwest::Client::builder()
}

/// A `bulkhead serve` process (this build's binary) started with `args` and `envs`, and the
/// URL it prints when it listens. Its later output is read and dropped.
pub fn serve_process(
    args: &[&std::ffi::OsStr],
    envs: &[(&str, &str)],
) -> (std::process::Child, String) {
    serve_process_of(None, args, envs)
}

/// The master key every replica of a benchmark's database shares.
pub const REPLICAS_SECRET_KEY: &str = "cmVwbGljYXMtc2hhcmUtb25lLXNlY3JldC1rZXktLS0=";

/// A `bulkhead serve` replica process (this build's), killed when dropped.
pub struct Replica {
    pub child: std::process::Child,
    pub base: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A replica on `database_url` with its data in `data_dir`, `token` as the administrator's
/// token and the replicas' shared key, with `envs` besides.
pub fn replica_start(
    database_url: &str,
    data_dir: &Path,
    token: &str,
    envs: &[(&str, &str)],
) -> Replica {
    let mut all = vec![
        ("BULKHEAD_BOOTSTRAP_TOKEN", token),
        ("BULKHEAD_SECRET_KEY", REPLICAS_SECRET_KEY),
        ("RUST_LOG", "error"),
    ];
    all.extend_from_slice(envs);
    let (child, base) = serve_process(
        &[
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--database-url".as_ref(),
            database_url.as_ref(),
            "--data-dir".as_ref(),
            data_dir.as_os_str(),
        ],
        &all,
    );
    Replica { child, base }
}

/// [`serve_process`] of `binary` (another build's `bulkhead`), or of this build's.
#[allow(dead_code)]
pub fn serve_process_of(
    binary: Option<&str>,
    args: &[&std::ffi::OsStr],
    envs: &[(&str, &str)],
) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut command = std::process::Command::new(binary.unwrap_or(env!("CARGO_BIN_EXE_bulkhead")));
    command
        .arg("serve")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for (key, value) in envs {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("bulkhead starts");
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let base = loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "exited before listening"
        );
        if let Some(url) = line.trim().strip_prefix("bulkhead listening on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || for _ in reader.lines() {});
    (child, base)
}

/// The revisions one watcher received, each with when it arrived.
pub type Arrivals = std::sync::Arc<std::sync::Mutex<Vec<(i64, std::time::Instant)>>>;

/// `count` watchers of `base`'s routing table, each on a connection of its own (as that many
/// edges would hold), resuming after `revision`: what each received, and their tasks.
pub async fn watchers_open(
    base: &str,
    revision: i64,
    count: usize,
) -> (Vec<Arrivals>, Vec<tokio::task::JoinHandle<()>>) {
    use futures::StreamExt;
    let http = http_builder().pool_max_idle_per_host(0).build().unwrap();
    let arrivals: Vec<Arrivals> = (0..count).map(|_| Arrivals::default()).collect();
    let mut watchers = Vec::new();
    for arrived in &arrivals {
        let response = http
            .get(format!("{base}/v1/routing-table/watch"))
            .bearer_auth(TOKEN)
            .header("accept", "text/event-stream")
            .header("last-event-id", revision.to_string())
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
        let arrived = arrived.clone();
        watchers.push(tokio::spawn(async move {
            let mut events = eventsource_stream::Eventsource::eventsource(response.bytes_stream());
            while let Some(Ok(event)) = events.next().await {
                if let Ok(revision) = event.id.parse::<i64>() {
                    arrived
                        .lock()
                        .unwrap()
                        .push((revision, std::time::Instant::now()));
                }
            }
        }));
    }
    (arrivals, watchers)
}

/// A domain of `service_id` as `POST …/verify` leaves it (verified: only verified domains
/// route), to insert straight into the server's database.
pub fn verified_domain(
    project_id: uuid::Uuid,
    service_id: uuid::Uuid,
    hostname: String,
) -> bulkhead::entity::domain::ActiveModel {
    use sea_orm::Set;
    let now = chrono::Utc::now();
    bulkhead::entity::domain::ActiveModel {
        id: Set(uuid::Uuid::now_v7()),
        project_id: Set(project_id.into()),
        service_id: Set(service_id.into()),
        hostname: Set(hostname),
        verification_token: Set(None),
        verified_at: Set(Some(now)),
        revision: Set(1),
        created_at: Set(now),
        updated_at: Set(now),
    }
}
