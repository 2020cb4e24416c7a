//! The control plane's own commands: `serve` (run the API server), `migrate` (schema
//! migrations), `secrets` (the master key) and `openapi` (print the document). They act on a
//! database or print what the server is; they never talk to a running server over HTTP.

use clap::Subcommand;

use bulkhead::config::{LogFormat, ServeArgs, Settings};

use bulkhead_common::process::{logging_init, shutdown_signal};

#[derive(Subcommand)]
pub enum SecretsAction {
    /// Re-wrap the database's data keys with a new master key (nothing else changes, and an
    /// interrupted rotation loses nothing). Without --new-key-file, the data directory's key is
    /// replaced by a new one.
    #[command(after_help = "Example:\n  bulkhead secrets rotate-key")]
    RotateKey {
        /// Where the new key is (generated there, 0600, if the file does not exist).
        #[arg(long)]
        new_key_file: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum MigrateAction {
    /// Apply all pending migrations.
    #[command(after_help = "Example:\n  bulkhead migrate up")]
    Up,
    /// Roll back the last N migrations.
    #[command(after_help = "Example:\n  bulkhead migrate down 2")]
    Down {
        #[arg(default_value_t = 1)]
        steps: u32,
    },
    /// List migrations and whether each is applied.
    #[command(after_help = "Example:\n  bulkhead migrate status")]
    Status,
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut settings = Settings::resolve(args)?;
    settings.bundled_plugins = crate::bundled_plugins();
    logging_init(settings.log_format == LogFormat::Json);
    let stop = shutdown_signal()?;
    let server = bulkhead::server::start(settings).await?;
    println!("bulkhead listening on {}", server.url());
    tracing::info!(addr = %server.addr, "listening");
    stop.await;
    tracing::info!("shutting down: finishing in-flight requests");
    server.shutdown().await
}

pub async fn migrate(args: ServeArgs, action: MigrateAction) -> anyhow::Result<()> {
    use bulkhead_migrations::{Migrator, MigratorTrait};
    let settings = Settings::resolve(args)?;
    logging_init(settings.log_format == LogFormat::Json);
    let setup = bulkhead::db::connect_for_migrations(&settings.database_url).await?;
    let db = &setup.db;
    match action {
        MigrateAction::Up => Migrator::up(db, None).await?,
        MigrateAction::Down { steps } => Migrator::down(db, Some(steps)).await?,
        MigrateAction::Status => {
            for migration in Migrator::get_migration_with_status(db).await? {
                println!("{:?}\t{}", migration.status(), migration.name());
            }
        }
    }
    Ok(())
}

pub async fn secrets(args: ServeArgs, action: SecretsAction) -> anyhow::Result<()> {
    let SecretsAction::RotateKey { new_key_file } = action;
    let settings = Settings::resolve(args)?;
    logging_init(settings.log_format == LogFormat::Json);
    let report =
        bulkhead::secrets::master_key_rotate_command(&settings, new_key_file.as_deref()).await?;
    println!("{report}");
    Ok(())
}

pub fn openapi(version: &str) -> anyhow::Result<()> {
    let doc = match version {
        "3.0" => serde_json::to_string_pretty(&bulkhead::http::openapi_document_v30()?)?,
        _ => bulkhead::http::openapi_document().to_pretty_json()?,
    };
    println!("{doc}");
    Ok(())
}
