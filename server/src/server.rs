//! Starting and stopping the server: database, migrations, keys, first-start bootstrap, the
//! listener, and graceful shutdown (in-flight requests finish; each write is one transaction,
//! so nothing is half-written).

use std::net::SocketAddr;
use std::sync::Arc;

use sea_orm::DatabaseConnection;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::app::App;
use crate::app::background::driver::Driver;
use crate::app::cluster::leases::Leases;
use crate::app::deploys::reconciler::Reconciler;
use crate::app::git::statuses::ForgeCalls;
use crate::app::identity::bootstrap::Bootstrap;
use crate::app::identity::sign_in::throttle::LoginThrottle;
use crate::app::projects::domain_verification::ChallengeResolver;
use crate::app::providers::health::HealthBoard;
use crate::auth::JwtKeys;
use crate::config::Settings;
use crate::plugins::PluginHost;
use crate::plugins::registry::ProviderRegistry;
use crate::secrets::{KeySource, MasterKey, SecretBox};

/// A server that is accepting connections.
pub struct RunningServer {
    /// The address actually bound (useful with port 0).
    pub addr: SocketAddr,
    pub app: App,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
    /// The background tasks (the leases' renewal among them, which hands them over when the
    /// server stops).
    tasks: Driver,
    /// Whether this start created the first administrator (the database had no users).
    pub first_start: bool,
}

impl RunningServer {
    /// The base URL it serves: `https://` with TLS, else `http://`.
    pub fn url(&self) -> String {
        let scheme = if self.app.settings.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops accepting connections, lets in-flight requests finish, and waits for the end.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        self.task.await??;
        self.tasks.join().await;
        self.app.db.clone().close().await?;
        Ok(())
    }
}

/// The master key of `settings` and the database's data keys, unwrapped. A key generated now
/// is announced (it must be backed up); a rotation of the data directory's key that stopped
/// after re-wrapping is finished.
async fn secrets_open(db: &DatabaseConnection, settings: &Settings) -> anyhow::Result<SecretBox> {
    use secrecy::ExposeSecret;
    let environment = settings
        .secret_key
        .as_ref()
        .map(|key| key.expose_secret().to_owned());
    let (master, source) = MasterKey::resolve(
        environment.as_deref(),
        settings.secret_key_file.as_deref(),
        &settings.data_dir,
    )?;
    let opened = match SecretBox::open(db, &master).await {
        Ok(opened) => opened,
        Err(err) => match (&source, MasterKey::pending(&settings.data_dir)) {
            (KeySource::DataDir(_), Some((pending, _))) => {
                let opened = SecretBox::open(db, &pending).await.map_err(|_| err)?;
                crate::secrets::data_dir_rotation_finish(&settings.data_dir)?;
                tracing::warn!(key_id = %pending.id, "finished an interrupted rotation of the secret key");
                opened
            }
            _ => return Err(err),
        },
    };
    match &source {
        KeySource::Generated(path) => println!(
            "Generated the secret key that encrypts secrets at rest: {} (id {}).\n\
             Back it up: without it, the secrets in this database cannot be read.\n",
            path.display(),
            master.id
        ),
        source => {
            tracing::info!(key_id = %opened.master_key_id, ?source, "secrets at rest are encrypted")
        }
    }
    Ok(opened)
}

/// Prepares the database and starts serving on `settings.listen`: HTTPS with `settings.tls`,
/// else plain HTTP.
pub async fn start(settings: Settings) -> anyhow::Result<RunningServer> {
    // Replicas starting together take turns from here until the administrator exists and every
    // secret is sealed (see `connect_for_migrations`).
    // On PostgreSQL, the server that accepts writes among those the URL names, followed from
    // here on.
    let primary = crate::db::Primary::locate(&settings.database_url).await?;
    let url = primary
        .as_ref()
        .map_or_else(|| settings.database_url.clone(), |primary| primary.url());
    let setup = crate::db::connect_for_migrations(&url).await?;
    crate::db::migrate_up(&setup.db).await?;
    let db = match &primary {
        Some(primary) => primary.pool(crate::db::PoolKind::Shared(16)).await?,
        None => crate::db::connect(&url).await?,
    };
    let (shutdown, mut stop) = watch::channel(false);
    let secrets = Arc::new(secrets_open(&db, &settings).await?);
    let jwt = Arc::new(JwtKeys::load_or_create(&db, &secrets).await?);
    let replica = format!("replica-{}", uuid::Uuid::new_v4().simple());
    let host = PluginHost::new(Some(&settings.data_dir.join("plugin-cache")))?;
    let app = App {
        db,
        primary,
        jwt,
        providers: Arc::new(ProviderRegistry::new(host)),
        health: Arc::new(HealthBoard::new(settings.provider_probe_interval)),
        login: Arc::new(LoginThrottle::new(settings.login_limits)),
        secrets,
        auth_cache: Arc::default(),
        changes: Default::default(),
        stopping: shutdown.subscribe(),
        reconciler: Arc::new(Reconciler::new(settings.deploy.clone(), replica.clone())),
        leases: Arc::new(Leases::new(replica)),
        routing: Arc::default(),
        deployment_watch: Arc::default(),
        log_followers: Arc::default(),
        known_addresses: Arc::default(),
        challenges: Arc::new(ChallengeResolver::new(settings.dns_resolver)?),
        forge: Arc::new(ForgeCalls::new(&settings.webhook_allowed_networks)?),
        sign_in: Arc::default(),
        tasks: Arc::default(),
        view_cache: Arc::default(),
        settings: Arc::new(settings),
    };
    let bootstrap = app.bootstrap().await?;
    let first_start = !matches!(bootstrap, Bootstrap::AlreadyDone);
    match bootstrap {
        Bootstrap::AlreadyDone => {}
        Bootstrap::CreatedWithGivenToken => {
            tracing::info!(email = %app.settings.admin_email, "created the administrator with BULKHEAD_BOOTSTRAP_TOKEN");
        }
        Bootstrap::CreatedWithGeneratedToken(token) => {
            // Shown once, on the terminal only; it is stored hashed and never logged.
            println!(
                "Created the administrator {}. Its API token (shown only now):\n\n    {token}\n",
                app.settings.admin_email
            );
        }
    }
    let sealed = app
        .secrets_seal_plaintext()
        .await
        .map_err(|err| anyhow::anyhow!("encrypting stored secrets: {err:?}"))?;
    if sealed > 0 {
        tracing::info!(
            values = sealed,
            "encrypted secrets stored in plaintext by an earlier version"
        );
    }
    app.providers_bundled_register()
        .await
        .map_err(|err| anyhow::anyhow!("registering the bundled plugins: {err:?}"))?;
    setup.close().await?;
    let _ = bulkhead_common::metrics::prometheus_handle();
    app.providers_start()
        .await
        .map_err(|err| anyhow::anyhow!("loading the providers: {err:?}"))?;
    if app.db.get_database_backend() == sea_orm::DbBackend::Postgres {
        // Until it listens to the other replicas' changes, a cached credential could be one
        // another replica revoked.
        app.auth_cache.trust(false);
    }
    let listener = TcpListener::bind(app.settings.listen).await?;
    let addr = listener.local_addr()?;
    let router = crate::http::router(app.clone());
    // The replica announces itself and takes the leases it can before its loops start, so
    // that a lone replica does its background work from the first pass.
    let leases_db = match &app.primary {
        Some(primary) => primary.pool(crate::db::PoolKind::Dedicated).await?,
        None => crate::db::connect_dedicated(&app.settings.database_url).await?,
    };
    let advertised = app
        .settings
        .advertise_url
        .clone()
        .unwrap_or_else(|| addr.to_string());
    app.replica_heartbeat(&leases_db, &advertised).await?;
    if let Err(err) = app.leases_renew(&leases_db).await {
        tracing::warn!(error = %err, "leases: could not take any at start");
    }
    // The routing table is served from the first request on (by the routing leader, which
    // publishes it; the others serve the latest published).
    // A lease can lapse between its renewal and the publication (a loaded machine): then
    // another replica leads routing and publishes, and this one serves what is published.
    let routing_ready = if app.leases.leads(crate::app::cluster::leases::Work::Routing) {
        match app.routing_refresh().await {
            Err(err) if err.code == crate::error::ErrorCode::NotReady => {
                tracing::info!(error = %err, "routing table: not published at start");
                app.routing_prepare().await
            }
            ready => ready,
        }
    } else {
        app.routing_prepare().await
    };
    routing_ready.map_err(|err| anyhow::anyhow!("building the routing table: {err:?}"))?;
    let tasks = crate::app::background::init::tasks_start(&app, leases_db, advertised);
    let tls = app.settings.tls.clone();
    let mut connections = app.settings.connections.clone();
    // A proxy forwards many clients' requests: its connections count toward the total only.
    connections.exempt = app.settings.trusted_proxies.clone();
    let task = tokio::spawn(bulkhead_common::serve::serve(
        listener,
        router,
        tls,
        connections,
        async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        },
    ));
    Ok(RunningServer {
        addr,
        app,
        shutdown,
        task,
        tasks,
        first_start,
    })
}
