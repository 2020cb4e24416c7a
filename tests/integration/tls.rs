//! TLS on loopback with certificates made here (rcgen): the server terminating it, and reading
//! its certificate again when the files change; the CLI logging in and deploying over it; a
//! wrong CA refused; the edge agent syncing from it; the host agent over TLS with its
//! certificate pinned in the `metal` provider's settings; and the client address taken from
//! forwarding headers only when a trusted proxy sends them.
//!
//! TLS is the same whatever the database, so these run on SQLite only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bulkhead::config::Settings;
use bulkhead_common::tls::server::ServerTls;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::cli_client::Cli;
use crate::support::{
    ADMIN_TOKEN, Backend, PASSWORD, TestServer, database_fresh, eventually, platform,
};

/// A certificate authority of the test's own, and where its certificate is.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: PathBuf,
}

impl TestCa {
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let pem = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&pem, certificate.pem()).unwrap();
        Self {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// Writes a certificate for `localhost` and 127.0.0.1 signed by this CA (and its key) to
    /// `certificate` and `key`; returns the certificate's DER.
    pub fn server_write(&self, certificate: &Path, key: &Path) -> Vec<u8> {
        let params =
            rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        let server_key = rcgen::KeyPair::generate().unwrap();
        let signed = params.signed_by(&server_key, &self.issuer).unwrap();
        std::fs::write(certificate, signed.pem()).unwrap();
        std::fs::write(key, server_key.serialize_pem()).unwrap();
        std::fs::set_permissions(key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        signed.der().to_vec()
    }

    /// A server certificate of this CA in `dir`, as the server's TLS settings.
    pub fn server_tls(&self, dir: &Path) -> ServerTls {
        let tls = ServerTls {
            certificate: dir.join("server.pem"),
            key: dir.join("server.key"),
        };
        self.server_write(&tls.certificate, &tls.key);
        tls
    }
}

/// A server on SQLite serving HTTPS with a certificate of `ca`, its test client trusting `ca`.
async fn tls_server(ca: &TestCa, dir: &Path, adjust: impl FnOnce(&mut Settings)) -> TestServer {
    let (database_url, data) = database_fresh(Backend::Sqlite).await.unwrap();
    let tls = ca.server_tls(dir);
    let s = TestServer::start_on(Backend::Sqlite, database_url, data, |settings| {
        settings.tls = Some(tls);
        adjust(settings);
    })
    .await;
    assert!(s.base.starts_with("https://127.0.0.1:"), "{}", s.base);
    s.with_ca(&ca.pem)
}

/// A client that trusts only the CA of `ca_file`.
fn client_trusting(ca_file: &Path) -> reqwest::Client {
    bulkhead_common::tls::crypto_provider_install();
    bulkhead_common::tls::http_client_builder(Some(ca_file))
        .unwrap()
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_logs_in_and_deploys_over_tls_and_a_wrong_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "platform");
    let s = tls_server(&ca, dir.path(), |_| {}).await;
    let (_platform, _platform_dir) = platform(&s).await;
    s.user_create("ana@example.com").await;

    // Plain HTTP to a TLS server is no answer; nothing is served in clear.
    let plain = crate::support::http()
        .get(s.base.replace("https://", "http://") + "/healthz")
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);

    // A wrong CA: refused, saying why, and nothing is stored.
    let other = TestCa::new(dir.path(), "other");
    let cli = Cli::new();
    let refused = cli
        .run_with_stdin(
            &format!(
                "login --server {} --email ana@example.com --password-stdin --ca-file {}",
                s.base,
                other.pem.display()
            ),
            &format!("{PASSWORD}\n"),
        )
        .await;
    let why = refused.exits(8);
    assert!(why.contains("certificate"), "{why}");
    assert!(!cli.credentials().exists());
    // The platform's roots do not know the test CA either.
    let refused = cli
        .run_with_stdin(
            &format!(
                "login --server {} --email ana@example.com --password-stdin",
                s.base
            ),
            &format!("{PASSWORD}\n"),
        )
        .await;
    assert!(
        refused.exits(8).contains("certificate"),
        "{}",
        refused.stderr
    );

    // The right CA: logged in; the CA file is remembered with the session.
    cli.run_with_stdin(
        &format!(
            "login --server {} --email ana@example.com --password-stdin --ca-file {}",
            s.base,
            ca.pem.display()
        ),
        &format!("{PASSWORD}\n"),
    )
    .await
    .ok();
    let stored = super::cli_client::stored(&cli.credentials());
    assert_eq!(stored["ca_file"], ca.pem.display().to_string());
    assert!(stored.to_string().contains("access_token"));

    // Deploy from scratch over TLS, following the event stream to the end.
    cli.run("projects create shop").await.ok();
    cli.run("projects environments create -p shop production")
        .await
        .ok();
    cli.run(
        "services create -p shop --environment production --name web --port 8080 \
         --command 'python3 -m http.server $PORT --bind 127.0.0.1' --replicas 1 --provider metal",
    )
    .await
    .ok();
    let deployed = cli.run("deploy -p shop -s web").await;
    assert!(
        deployed.ok().contains("deployment.healthy"),
        "{}",
        deployed.stdout
    );

    // BULKHEAD_CA_FILE stands for --ca-file; a wrong one is refused even with a good token.
    let mut with_env = Cli::with_token(&s.base, ADMIN_TOKEN);
    with_env
        .env
        .push(("BULKHEAD_CA_FILE", other.pem.display().to_string()));
    assert!(
        with_env
            .run("projects list")
            .await
            .exits(8)
            .contains("certificate")
    );
    let mut with_env = Cli::with_token(&s.base, ADMIN_TOKEN);
    with_env
        .env
        .push(("BULKHEAD_CA_FILE", ca.pem.display().to_string()));
    with_env.run("projects list").await.ok();

    // Plain HTTP to a host that is not loopback is refused before anything is sent.
    let cleartext = Cli::with_token("http://192.0.2.1:8080", ADMIN_TOKEN)
        .run("projects list")
        .await;
    assert!(
        cleartext.exits(2).contains("in clear"),
        "{}",
        cleartext.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_swapped_on_disk_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = TestCa::new(dir.path(), "first");
    let s = tls_server(&first, dir.path(), |_| {}).await;
    let healthz = s.url("/healthz");
    let trusting_first = client_trusting(&first.pem);
    assert_eq!(
        trusting_first.get(&healthz).send().await.unwrap().status(),
        200
    );

    // A renewal by another CA, written over the files the server was started with: the
    // connections that follow get it, with no restart.
    let second = TestCa::new(dir.path(), "second");
    second.server_write(
        &dir.path().join("server.pem"),
        &dir.path().join("server.key"),
    );
    let started = std::time::Instant::now();
    eventually("the new certificate is served", async || {
        // A new client, so a new connection and a new handshake.
        client_trusting(&second.pem)
            .get(&healthz)
            .send()
            .await
            .is_ok()
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        client_trusting(&first.pem)
            .get(&healthz)
            .send()
            .await
            .is_err()
    );

    // Files that do not load (a key that is not the certificate's) keep the last good one.
    first.server_write(
        &dir.path().join("server.pem"),
        &dir.path().join("unused.key"),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        client_trusting(&second.pem)
            .get(&healthz)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_agent_syncs_from_a_tls_control_plane() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "platform");
    let s = tls_server(&ca, dir.path(), |_| {}).await;
    let edge_dir = tempfile::tempdir().unwrap();
    let wrong = TestCa::new(dir.path(), "wrong");

    // Verified with the right CA: the edge applies the control plane's table.
    let edge = crate::edge::edge_over(&s, edge_dir.path(), Some(ca.pem.clone())).await;
    eventually("the edge has the control plane's table", async || {
        edge.edge.state().revision() >= 1
    })
    .await;
    edge.shutdown().await;

    // Verified with a CA that did not sign it: nothing is applied, and the edge says why.
    let edge_dir = tempfile::tempdir().unwrap();
    let edge = crate::edge::edge_over(&s, edge_dir.path(), Some(wrong.pem.clone())).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(edge.edge.state().revision(), 0);
    edge.shutdown().await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metal_provider_reaches_a_tls_agent_by_its_pinned_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (database_url, data) = database_fresh(Backend::Sqlite).await.unwrap();
    let s = TestServer::start_on(Backend::Sqlite, database_url, data, |_| {}).await;

    // An agent serving its API over TLS with a self-signed certificate of its own.
    let agent_ca = TestCa::new(dir.path(), "agent");
    let tls = ServerTls {
        certificate: dir.path().join("agent.pem"),
        key: dir.path().join("agent.key"),
    };
    let der = agent_ca.server_write(&tls.certificate, &tls.key);
    let pin = hex::encode(Sha256::digest(&der));
    let token = "the-fleet-agent-token-0001";
    let mut settings = bulkhead_agent::AgentSettings::new(
        "127.0.0.1:0".parse().unwrap(),
        dir.path().join("agent"),
        token,
    );
    settings.insecure_same_user = true;
    settings.tls = Some(tls);
    let agent = bulkhead_agent::start_in_free_uids(settings).await.unwrap();
    assert!(agent.url().starts_with("https://"), "{}", agent.url());

    let configure = async |pin: &str| {
        s.patch(
            "/v1/providers/metal",
            ADMIN_TOKEN,
            json!({
                "config": { "agents": agent.url(), "regions": "local", "tls_certificate_sha256": pin },
                "secrets": { "agent_token": token },
                // A loopback agent: only a listed pattern opens its address.
                "allowlist": [agent.url().trim_start_matches("https://")],
                "enabled": true,
            }),
        )
        .await
    };
    // A pin that is not a SHA-256 is refused.
    configure("not-a-pin")
        .await
        .assert_problem(422, "invalid_request");

    let create = json!({ "instance_key": "web-1", "region": "local", "artifact": "sleep 600", "port": 8080 });
    // Pinned to another certificate: the agent is not reached.
    configure(&"ab".repeat(32)).await.assert_status(200);
    let refused = s
        .post("/v1/providers/metal/instances", ADMIN_TOKEN, create.clone())
        .await;
    assert!(refused.status >= 500, "{}", refused.text);
    assert!(!refused.text.contains(token));

    // Pinned to its certificate (colons as openssl prints them): provisioned over TLS.
    let colons = pin
        .as_bytes()
        .chunks(2)
        .map(|pair| std::str::from_utf8(pair).unwrap().to_uppercase())
        .collect::<Vec<_>>()
        .join(":");
    configure(&colons).await.assert_status(200);
    let made = s
        .post("/v1/providers/metal/instances", ADMIN_TOKEN, create)
        .await;
    assert!(
        made.assert_status(201)["provider_id"]
            .as_str()
            .unwrap()
            .starts_with("https://"),
        "{}",
        made.text
    );
    s.delete("/v1/providers/metal/instances/web-1", ADMIN_TOKEN)
        .await
        .assert_status(204);
    agent.shutdown_and_stop_workloads().await;
}

/// Wrong-password logins from `client` (as `X-Forwarded-For` says) until one is throttled:
/// the statuses.
async fn logins_from(s: &TestServer, client: &str, tries: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..tries {
        let reply = TestServer::send(
            s.request(reqwest::Method::POST, "/v1/auth/login", None)
                .header("x-forwarded-for", format!("6.6.6.6, {client}"))
                .json(&json!({ "email": "ana@example.com", "password": "not the password" })),
        )
        .await;
        statuses.push(reply.status);
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_limits_count_the_address_a_trusted_proxy_forwards() {
    let limits = |settings: &mut Settings| {
        settings.login_limits.per_ip_per_minute = 3;
        settings.login_limits.per_account_per_minute = 100;
    };
    // Behind a trusted proxy (the test itself, on loopback): each client has its own limit.
    let (database_url, data) = database_fresh(Backend::Sqlite).await.unwrap();
    let s = TestServer::start_on(Backend::Sqlite, database_url, data, |settings| {
        limits(settings);
        settings.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    })
    .await;
    s.user_create("ana@example.com").await;
    assert_eq!(
        logins_from(&s, "198.51.100.1", 4).await,
        [401, 401, 401, 429]
    );
    assert_eq!(logins_from(&s, "198.51.100.2", 1).await, [401]);
    s.stop().await;

    // From a peer that is not trusted, the header is ignored: one address, one limit, and a
    // client cannot dodge it by writing another address.
    let (database_url, data) = database_fresh(Backend::Sqlite).await.unwrap();
    let s = TestServer::start_on(Backend::Sqlite, database_url, data, limits).await;
    s.user_create("ana@example.com").await;
    assert_eq!(logins_from(&s, "198.51.100.1", 3).await, [401, 401, 401]);
    assert_eq!(logins_from(&s, "198.51.100.2", 1).await, [429]);
    s.stop().await;
}
