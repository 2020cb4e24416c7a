//! Starting and stopping the server: database, migrations, keys, first-start bootstrap, the
//! listener, and graceful shutdown (in-flight requests finish; each write is one transaction,
//! so nothing is half-written).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::app::App;
use crate::app::bootstrap::Bootstrap;
use crate::app::provider_health::HealthBoard;
use crate::auth::JwtKeys;
use crate::config::Settings;
use crate::plugins::PluginHost;
use crate::plugins::registry::ProviderRegistry;

/// A server that is accepting connections.
pub struct RunningServer {
    /// The address actually bound (useful with port 0).
    pub addr: SocketAddr,
    pub app: App,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// Stops accepting connections, lets in-flight requests finish, and waits for the end.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        self.task.await??;
        self.app.db.clone().close().await?;
        Ok(())
    }
}

/// Prepares the database and starts serving on `settings.listen`.
pub async fn start(settings: Settings) -> anyhow::Result<RunningServer> {
    let migrator = crate::db::connect_for_migrations(&settings.database_url).await?;
    crate::db::migrate_up(&migrator).await?;
    migrator.close().await?;
    let db = crate::db::connect(&settings.database_url).await?;
    let jwt = Arc::new(JwtKeys::load_or_create(&db).await?);
    let host = PluginHost::new(Some(&settings.data_dir.join("plugin-cache")))?;
    let app = App {
        db,
        jwt,
        providers: Arc::new(ProviderRegistry::new(host)),
        health: Arc::new(HealthBoard::new(settings.provider_probe_interval)),
        settings: Arc::new(settings),
    };
    match app.bootstrap().await? {
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
    let _ = crate::http::metrics_handle();
    app.providers_start()
        .await
        .map_err(|err| anyhow::anyhow!("loading the providers: {err:?}"))?;
    let listener = TcpListener::bind(app.settings.listen).await?;
    let addr = listener.local_addr()?;
    let router = crate::http::router(app.clone());
    let (shutdown, mut stop) = watch::channel(false);
    tokio::spawn(app.clone().provider_health_run(shutdown.subscribe()));
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            })
            .await
    });
    Ok(RunningServer {
        addr,
        app,
        shutdown,
        task,
    })
}
