//! The test context: a real Bulkhead server on 127.0.0.1:0 with a fresh database (SQLite in a
//! temporary directory, or a new PostgreSQL database when `BULKHEAD_TEST_POSTGRES_URL` is
//! set), and a small HTTP client around it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bulkhead::app::identity::sign_in::throttle::LoginLimits;
use bulkhead::config::{DeploySettings, LogFormat, Settings};
use bulkhead::server::RunningServer;
use reqwest::Method;
use reqwest::header::HeaderMap;
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use tempfile::TempDir;

/// The administrator's API token of every test server (`BULKHEAD_BOOTSTRAP_TOKEN`).
pub const ADMIN_TOKEN: &str = "bh_test_bootstrap_admin_token_0123456789";
pub const PASSWORD: &str = "correct horse battery staple";
/// The secret key of replicas sharing a database ([`TestServer::replica_start`]).
pub const REPLICAS_SECRET_KEY: &str = "cmVwbGljYXMtc2hhcmUtb25lLXNlY3JldC1rZXktLS0=";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Generates, for each named `async fn(TestServer)`, a module with a `sqlite` test and a
/// `postgres` test (which is skipped, saying so, without `BULKHEAD_TEST_POSTGRES_URL`).
#[macro_export]
macro_rules! db_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let server = $crate::support::TestServer::start($crate::support::Backend::Sqlite).await;
                    super::$name(server.expect("sqlite is always available")).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    match $crate::support::TestServer::start($crate::support::Backend::Postgres).await {
                        Some(server) => super::$name(server).await,
                        None => {} // said by `database_fresh`
                    }
                }
            }
        )*
    };
}

/// Generates, for each named `async fn(Backend)`, a module with a `sqlite` test and a
/// `postgres` test (the function itself skips, saying so, without a PostgreSQL URL).
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),*) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::support::Backend::Sqlite).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::support::Backend::Postgres).await;
                }
            }
        )*
    };
}

/// Says that a PostgreSQL test is skipped for want of `BULKHEAD_TEST_POSTGRES_URL`; under CI
/// (`CI` set), where every test must run, fails instead.
pub fn postgres_skipped() {
    if std::env::var_os("CI").is_some() {
        panic!("CI is set, and BULKHEAD_TEST_POSTGRES_URL is not: the PostgreSQL tests must run");
    }
    eprintln!("skipped: set BULKHEAD_TEST_POSTGRES_URL to run on PostgreSQL");
}

/// A fresh, empty database: its URL, and the directory that holds it (SQLite) or the server's
/// data directory (PostgreSQL). `None` for PostgreSQL when it is not configured.
pub async fn database_fresh(backend: Backend) -> Option<(String, TempDir)> {
    let dir = tempfile::tempdir().expect("temporary directory");
    match backend {
        Backend::Sqlite => Some((
            format!("sqlite://{}", dir.path().join("bulkhead.db").display()),
            dir,
        )),
        Backend::Postgres => {
            let Some(admin_url) = std::env::var("BULKHEAD_TEST_POSTGRES_URL")
                .ok()
                .filter(|url| !url.is_empty())
            else {
                postgres_skipped();
                return None;
            };
            // The creation time in the name: stale ones are told apart from those of a test
            // run going on in another process.
            let name = format!(
                "bulkhead_test_{}_{}",
                chrono::Utc::now().timestamp(),
                uuid::Uuid::new_v4().simple()
            );
            let admin = Database::connect(&admin_url).await.unwrap_or_else(|err| {
                panic!("BULKHEAD_TEST_POSTGRES_URL={admin_url} does not answer: {err}")
            });
            STALE_DATABASES_DROPPED
                .get_or_init(|| stale_databases_drop(&admin))
                .await;
            admin
                .execute_unprepared(&format!("CREATE DATABASE {name}"))
                .await
                .expect("create test database");
            admin.close().await.ok();
            let mut url =
                reqwest::Url::parse(&admin_url).expect("BULKHEAD_TEST_POSTGRES_URL is a URL");
            url.set_path(&name);
            Some((url.to_string(), dir))
        }
    }
}

static STALE_DATABASES_DROPPED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Drops the databases that earlier test runs created more than two hours ago, once per test
/// process, so that they do not pile up (a test's own database is kept for post-mortems) and
/// so that test runs going on at the same time in other processes keep theirs.
async fn stale_databases_drop(admin: &sea_orm::DatabaseConnection) {
    let cutoff = chrono::Utc::now().timestamp() - 2 * 3600;
    let stale = admin
        .query_all_raw(sea_orm::Statement::from_string(
            admin.get_database_backend(),
            "SELECT datname FROM pg_database WHERE datname LIKE 'bulkhead\\_test\\_%'",
        ))
        .await
        .expect("list test databases");
    for row in stale {
        let name: String = row.try_get_by_index(0).expect("datname");
        let created = name
            .trim_start_matches("bulkhead_test_")
            .split('_')
            .next()
            .and_then(|secs| secs.parse::<i64>().ok());
        // Names without a time are from older versions of this code: stale.
        if created.is_some_and(|secs| secs > cutoff) {
            continue;
        }
        admin
            .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .ok();
    }
}

/// Settings of a test server on `database_url`.
pub fn settings(database_url: &str, data_dir: &Path) -> Settings {
    Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls: None,
        trusted_proxies: Vec::new(),
        // The tests' webhook receivers listen on loopback.
        webhook_allowed_networks: vec!["127.0.0.0/8".parse().unwrap()],
        sign_in_providers: Vec::new(),
        client_address_header: Default::default(),
        data_dir: data_dir.to_owned(),
        database_url: database_url.to_owned(),
        cors_origins: vec!["https://dashboard.example.com".into()],
        request_timeout: Duration::from_secs(30),
        body_limit_bytes: 64 * 1024,
        access_token_ttl: Duration::from_secs(900),
        refresh_token_ttl: Duration::from_secs(3600),
        admin_email: "admin@example.com".into(),
        log_format: LogFormat::Text,
        provider_probe_interval: Duration::from_millis(500),
        bootstrap_token: Some(ADMIN_TOKEN.to_owned().into()),
        bootstrap_password: None,
        // The suite logs in often from one address; the limits have tests of their own.
        login_limits: LoginLimits {
            per_ip_per_minute: 100_000,
            per_account_per_minute: 100_000,
            ..LoginLimits::default()
        },
        limits: Default::default(),
        service_sizes: Default::default(),
        connections: bulkhead_common::serve::ConnectionLimits::for_this_process(),
        secret_key: None,
        secret_key_file: None,
        deploy: DeploySettings {
            reconcile_interval: Duration::from_millis(200),
            drain_grace: Duration::from_millis(300),
            ..DeploySettings::default()
        },
        // Short, so that a test can outrun it.
        routing_history: 5,
        advertise_url: None,
        dns_resolver: Some(dns().dns_addr),
        bundled_plugins: bundled_plugins(),
    }
}

/// The plugins the tests' servers bundle: the binary's, and the demo `example` provider.
pub fn bundled_plugins() -> bulkhead::plugins::bundled::BundledPlugins {
    static WITH_EXAMPLE: std::sync::LazyLock<Vec<(&str, &[u8])>> = std::sync::LazyLock::new(|| {
        std::iter::once(bulkhead_bundled_plugins::EXAMPLE)
            .chain(bulkhead_bundled_plugins::WASM.iter().copied())
            .collect()
    });
    bulkhead::plugins::bundled::BundledPlugins(WITH_EXAMPLE.as_slice())
}

/// The DNS server every test server asks for domains' challenges: one for the whole suite, on
/// a runtime of its own (each test's runtime ends with the test).
pub fn dns() -> &'static bulkhead_simulators::dns::DnsSimulator {
    static DNS: std::sync::LazyLock<bulkhead_simulators::dns::DnsSimulator> =
        std::sync::LazyLock::new(|| {
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move {
                    let dns = bulkhead_simulators::dns::DnsSimulator::start()
                        .await
                        .expect("the DNS simulator starts");
                    sender.send(dns).expect("the suite waits for it");
                    std::future::pending::<()>().await
                });
            });
            receiver.recv().expect("the DNS simulator started")
        });
    &DNS
}

/// Binds `hostname` to `service` of `project` and verifies it (its challenge published on
/// [`dns`]): the domain, verified. Only verified domains route.
pub async fn domain_bind(
    s: &TestServer,
    token: &str,
    project: &str,
    service: &str,
    hostname: &str,
) -> Value {
    let created = s
        .post(
            &format!("/v1/projects/{project}/domains"),
            token,
            json!({ "hostname": hostname, "service_id": service }),
        )
        .await;
    let created = created.assert_status(201).clone();
    let challenge = &created["challenge"];
    dns().txt_add(
        challenge["name"]
            .as_str()
            .expect("a pending domain's challenge"),
        challenge["value"].as_str().unwrap().to_owned(),
    );
    let verified = s
        .call(
            Method::POST,
            &format!(
                "/v1/projects/{project}/domains/{}/verify",
                created["id"].as_str().unwrap()
            ),
            Some(token),
            None,
        )
        .await;
    let verified = verified.assert_status(200).clone();
    assert_eq!(verified["status"], "verified");
    verified
}

/// A response, with its body parsed as JSON (`Null` when empty or not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a problem+json answer with `status` and `code`, carrying the request id.
    #[track_caller]
    pub fn assert_problem(&self, status: u16, code: &str) {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "body: {}",
            self.text
        );
        assert_eq!(self.body["status"], status);
        assert_eq!(self.body["code"], code, "body: {}", self.text);
        // Every code is one of the documented list (the OpenAPI document's enum).
        let problem: bulkhead::http::problem::Problem = serde_json::from_value(self.body.clone())
            .unwrap_or_else(|err| panic!("not a documented problem ({err}): {}", self.text));
        assert_eq!(problem.code.as_str(), code);
        assert!(!self.body["detail"].as_str().unwrap_or_default().is_empty());
        let request_id = self.header("x-request-id").expect("x-request-id header");
        assert_eq!(self.body["request_id"], request_id);
    }

    #[track_caller]
    pub fn assert_status(&self, status: u16) -> &Value {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        &self.body
    }
}

pub struct TestServer {
    pub base: String,
    pub http: reqwest::Client,
    pub database_url: String,
    pub backend: Backend,
    server: Option<RunningServer>,
    dir: TempDir,
}

impl TestServer {
    /// Starts a server on a fresh database of `backend`.
    pub async fn start(backend: Backend) -> Option<Self> {
        let (database_url, dir) = database_fresh(backend).await?;
        Some(Self::start_on(backend, database_url, dir, |_| {}).await)
    }

    /// [`Self::start`] with settings adjusted by `adjust`.
    pub async fn start_with(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> Option<Self> {
        let (database_url, dir) = database_fresh(backend).await?;
        Some(Self::start_on(backend, database_url, dir, adjust).await)
    }

    /// Starts a server on an existing database, with settings adjusted by `adjust`.
    pub async fn start_on(
        backend: Backend,
        database_url: String,
        dir: TempDir,
        adjust: impl FnOnce(&mut Settings),
    ) -> Self {
        // The servers' logs, when asked for (`RUST_LOG=warn cargo test … -- --nocapture`).
        if std::env::var_os("RUST_LOG").is_some() {
            static LOGGING: std::sync::Once = std::sync::Once::new();
            LOGGING.call_once(|| bulkhead_common::process::logging_init(false));
        }
        let mut settings = settings(&database_url, dir.path());
        adjust(&mut settings);
        let server = bulkhead::server::start(settings)
            .await
            .expect("server starts");
        let http = http_builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        Self {
            base: server.url(),
            http,
            database_url,
            backend,
            server: Some(server),
            dir,
        }
    }

    /// A replica of a control plane on `database_url`: a data directory of its own, and the
    /// secret key that every replica of that database shares.
    pub async fn replica_start(backend: Backend, database_url: &str) -> Self {
        Self::replica_start_with(backend, database_url, |_| {}).await
    }

    /// [`Self::replica_start`] with settings adjusted by `adjust`.
    pub async fn replica_start_with(
        backend: Backend,
        database_url: &str,
        adjust: impl FnOnce(&mut Settings),
    ) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        Self::start_on(backend, database_url.to_owned(), dir, |settings| {
            settings.secret_key = Some(REPLICAS_SECRET_KEY.to_owned().into());
            adjust(settings);
        })
        .await
    }

    /// This server, its client trusting the CA certificates of `ca_file` (a TLS server).
    pub fn with_ca(mut self, ca_file: &Path) -> Self {
        self.http = bulkhead_common::tls::http_client_builder(Some(ca_file))
            .unwrap()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        self
    }

    /// Stops the server gracefully and starts a new one on the same database.
    pub async fn restart(self) -> Self {
        self.restart_with(|_| {}).await
    }

    /// [`Self::restart`] with settings adjusted by `adjust`.
    pub async fn restart_with(mut self, adjust: impl FnOnce(&mut Settings)) -> Self {
        self.server
            .take()
            .expect("running")
            .shutdown()
            .await
            .expect("graceful shutdown");
        Self::start_on(self.backend, self.database_url.clone(), self.dir, adjust).await
    }

    /// Stops the server (its streams end, its connections close) and keeps nothing running.
    pub async fn stop(mut self) {
        self.server
            .take()
            .expect("running")
            .shutdown()
            .await
            .expect("graceful shutdown");
    }

    pub fn app(&self) -> &bulkhead::app::App {
        &self.server.as_ref().expect("running").app
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn request(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let builder = self.http.request(method, self.url(path));
        match token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    pub async fn send(builder: reqwest::RequestBuilder) -> Reply {
        let response = builder.send().await.expect("request is answered");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    /// The raw answer to a request of which only `head` is sent: its request line and headers,
    /// declaring a body that never follows. For the limits the server enforces before it reads
    /// a body: a client that sends a body the server refuses races the server's close, whose
    /// reset can discard the answer before the client reads it.
    pub async fn head_only_answer(&self, head: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.base.trim_start_matches("http://"))
            .await
            .unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let read_whole = async {
            let mut chunk = [0u8; 4096];
            loop {
                let read = stream.read(&mut chunk).await.unwrap_or(0);
                answer.extend_from_slice(&chunk[..read]);
                if read == 0 || answer_complete(&answer) {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), read_whole)
            .await
            .expect("the server answers without waiting for the body");
        String::from_utf8_lossy(&answer).into_owned()
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut builder = self.request(method, path, token);
        if let Some(body) = body {
            builder = builder.json(&body);
        }
        Self::send(builder).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    pub async fn patch(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::PATCH, path, Some(token), Some(body))
            .await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Reply {
        self.call(Method::DELETE, path, Some(token), None).await
    }

    /// Creates a user with [`PASSWORD`] (as the administrator) and returns its id.
    pub async fn user_create(&self, email: &str) -> String {
        let reply = self
            .post(
                "/v1/users",
                ADMIN_TOKEN,
                json!({ "email": email, "name": email, "password": PASSWORD }),
            )
            .await;
        reply.assert_status(201)["id"].as_str().unwrap().to_owned()
    }

    /// Logs in with [`PASSWORD`] and returns the session's tokens.
    pub async fn login(&self, email: &str) -> Value {
        let reply = self
            .call(
                Method::POST,
                "/v1/auth/login",
                None,
                Some(json!({ "email": email, "password": PASSWORD })),
            )
            .await;
        reply.assert_status(200).clone()
    }

    /// Creates a user and returns an access token of theirs.
    pub async fn user_with_session(&self, email: &str) -> String {
        self.user_create(email).await;
        self.login(email).await["access_token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Creates a project as `token` and returns its id.
    pub async fn project_create(&self, token: &str, name: &str) -> String {
        let reply = self
            .post("/v1/projects", token, json!({ "name": name }))
            .await;
        reply.assert_status(201)["id"].as_str().unwrap().to_owned()
    }

    /// A new user's project `name` with an environment and one service (an artifact, never
    /// deployed here): its owner's session, its id and the service's id.
    pub async fn project_with_service(&self, name: &str) -> ProjectWithService {
        self.project_with_service_of(
            name,
            json!({
                "name": "web",
                "source": { "type": "artifact", "image": "shop/web:1" },
                "port": 8080,
            }),
        )
        .await
    }

    /// [`Self::project_with_service`] with the service `service` (a create's body).
    pub async fn project_with_service_of(&self, name: &str, service: Value) -> ProjectWithService {
        let owner = self
            .user_with_session(&format!(
                "{name}-{}@example.com",
                uuid::Uuid::new_v4().simple()
            ))
            .await;
        let id = self.project_create(&owner, name).await;
        let environment = self.environment_create(&owner, &id, "production").await;
        let service = self
            .service_create(&owner, &id, &environment, service)
            .await;
        ProjectWithService { owner, id, service }
    }

    /// Creates environment `name` in `project` as `token`; returns its id.
    pub async fn environment_create(&self, token: &str, project: &str, name: &str) -> String {
        let made = self
            .post(
                &format!("/v1/projects/{project}/environments"),
                token,
                json!({ "name": name }),
            )
            .await;
        made.assert_status(201)["id"].as_str().unwrap().to_owned()
    }

    /// Creates a service of `body` in `environment` of `project` as `token`; returns its id.
    pub async fn service_create(
        &self,
        token: &str,
        project: &str,
        environment: &str,
        mut body: Value,
    ) -> String {
        body["environment_id"] = json!(environment);
        let made = self
            .post(&format!("/v1/projects/{project}/services"), token, body)
            .await;
        made.assert_status(201)["id"].as_str().unwrap().to_owned()
    }

    /// Invites `email` to the project with `role` (as `inviter`) and returns the invitation's id.
    pub async fn invite(&self, inviter: &str, project_id: &str, email: &str, role: &str) -> String {
        let path = format!("/v1/projects/{project_id}/invitations");
        let invited = self
            .post(&path, inviter, json!({ "email": email, "role": role }))
            .await;
        invited.assert_status(201)["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Adds `email` (a user with [`PASSWORD`]) to the project with `role`: the administrator
    /// invites, the user logs in and accepts.
    pub async fn member_add(&self, project_id: &str, email: &str, role: &str) {
        let invitation = self.invite(ADMIN_TOKEN, project_id, email, role).await;
        let session = self.login(email).await["access_token"]
            .as_str()
            .unwrap()
            .to_owned();
        self.call(
            Method::POST,
            &format!("/v1/me/invitations/{invitation}/accept"),
            Some(&session),
            None,
        )
        .await
        .assert_status(201);
    }
}

/// The directory of the Wasm plugins built from `plugins/` by the `bulkhead-api` build script.
pub fn plugins_dir() -> &'static Path {
    Path::new(bulkhead_bundled_plugins::PLUGINS_DIR)
}

/// The bytes of a plugin built by [`plugins_dir`], e.g. `bulkhead_plugin_example.wasm`.
pub fn plugin_bytes(file: &str) -> Vec<u8> {
    std::fs::read(plugins_dir().join(file)).unwrap_or_else(|err| panic!("{file}: {err}"))
}

/// The `state` of provider `name` (healthy, degraded, unavailable, drained, disabled).
pub async fn provider_state(s: &TestServer, name: &str) -> String {
    let view = s.get(&format!("/v1/providers/{name}"), ADMIN_TOKEN).await;
    view.assert_status(200)["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Polls until provider `name` is in `state` (at most 15 s); returns how long that took.
pub async fn state_wait(s: &TestServer, name: &str, state: &str) -> Duration {
    let started = std::time::Instant::now();
    while provider_state(s, name).await != state {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{name} did not become {state}; it is {}",
            provider_state(s, name).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// A local platform (simulators and an agent) with the bundled providers pointed at it.
pub async fn platform(s: &TestServer) -> (bulkhead::dev::DevPlatform, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let platform = bulkhead::dev::DevPlatform::start(dir.path()).await.unwrap();
    for (name, update) in platform.provider_updates() {
        s.patch(
            &format!("/v1/providers/{name}"),
            ADMIN_TOKEN,
            serde_json::to_value(update).unwrap(),
        )
        .await
        .assert_status(200);
        healthy_probe(s, name).await;
    }
    (platform, dir)
}

/// Polls `check` every 100 ms until it holds; fails saying `what` after 60 s.
/// Whether `answer` holds a whole HTTP/1.1 answer: its head and the `content-length` bytes after.
fn answer_complete(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    length.is_some_and(|length| body.len() >= length)
}

pub async fn eventually<F: AsyncFn() -> bool>(what: &str, check: F) {
    let started = std::time::Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: not within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Probes provider `name` now, as the administrator (`POST /v1/providers/{name}/probe`).
pub async fn provider_probe(s: &TestServer, name: &str) -> Reply {
    s.post(
        &format!("/v1/providers/{name}/probe"),
        ADMIN_TOKEN,
        json!({}),
    )
    .await
}

/// Probes provider `name` until it is healthy: after a change of its settings, the probes
/// (not a stale state) say so.
pub async fn healthy_probe(s: &TestServer, name: &str) {
    let started = std::time::Instant::now();
    loop {
        let probe = provider_probe(s, name).await;
        if probe.status == 200 && provider_state(s, name).await == "healthy" {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{name} did not become healthy: {}",
            probe.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A plain HTTP client for tests (reqwest's TLS is configured by bulkhead-common in this build,
/// so its crypto provider must be installed before a client is built).
pub fn http() -> reqwest::Client {
    http_builder().build().expect("a client builds")
}

/// [`http`]'s builder, for tests that set more.
pub fn http_builder() -> reqwest::ClientBuilder {
    bulkhead_common::tls::crypto_provider_install();
    reqwest::Client::builder()
}

/// `GET url` with [`http`] (as `reqwest::get`, which would build a client without the crypto
/// provider installed).
pub async fn get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    http().get(url).send().await
}

/// The bootstrap token of a [`ChildServer`].
pub const CHILD_TOKEN: &str = "crash-test-admin-token-0001";

/// The real `bulkhead` binary as a child process, to be killed.
pub struct ChildServer {
    child: Child,
    /// Where its logs go (shown when an answer is not the one expected).
    pub log: std::path::PathBuf,
    pub base: String,
    pub http: reqwest::Client,
}

impl ChildServer {
    /// Starts `bulkhead serve` on `database_url`, its bootstrap token [`CHILD_TOKEN`].
    pub fn start(database_url: &str, data_dir: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--database-url",
                database_url,
            ])
            .arg("--data-dir")
            .arg(data_dir)
            .args([
                "--reconcile-interval-ms",
                "100",
                "--drain-grace-ms",
                "200",
                "--provider-probe-interval-ms",
                "500",
            ])
            .env("BULKHEAD_BOOTSTRAP_TOKEN", CHILD_TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(data_dir.with_extension("log"))
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let base = loop {
            let mut line = String::new();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "the server exited before listening"
            );
            if let Some(addr) = line.trim().strip_prefix("bulkhead listening on ") {
                break addr.to_owned();
            }
        };
        // Keep draining its output, so that its later prints never meet a closed pipe.
        std::thread::spawn(move || for _ in reader.lines() {});
        Self {
            log: data_dir.with_extension("log"),
            child,
            base,
            http: crate::support::http_builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    /// SIGKILL: no shutdown, nothing flushed.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(CHILD_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(
            status,
            200,
            "GET {path}: {body}\nserver log:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        body
    }
}

/// A project made by [`TestServer::project_with_service`].
pub struct ProjectWithService {
    /// Its owner's access token.
    pub owner: String,
    pub id: String,
    pub service: String,
}
