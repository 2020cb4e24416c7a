//! The `bulkhead` command: `serve`, `migrate` and `openapi`.

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use bulkhead::config::{LogFormat, ServeArgs, Settings};

#[derive(Parser)]
#[command(
    name = "bulkhead",
    version,
    about = "Bulkhead control-plane API server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API server (migrations are applied at start-up).
    Serve(ServeArgs),
    /// Apply, roll back or list schema migrations.
    Migrate {
        #[command(flatten)]
        args: ServeArgs,
        #[command(subcommand)]
        action: MigrateAction,
    },
    /// Print the OpenAPI document (the committed copy is `openapi/openapi.json`).
    Openapi,
}

#[derive(Subcommand)]
enum MigrateAction {
    /// Apply all pending migrations.
    Up,
    /// Roll back the last N migrations.
    Down {
        #[arg(default_value_t = 1)]
        steps: u32,
    },
    /// List migrations and whether each is applied.
    Status,
}

fn logging_init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler can be installed");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => {
            let settings = Settings::resolve(args)?;
            logging_init(settings.log_format);
            let server = bulkhead::server::start(settings).await?;
            println!("bulkhead listening on http://{}", server.addr);
            tracing::info!(addr = %server.addr, "listening");
            shutdown_signal().await;
            tracing::info!("shutting down: finishing in-flight requests");
            server.shutdown().await?;
        }
        Command::Migrate { args, action } => {
            let settings = Settings::resolve(args)?;
            logging_init(settings.log_format);
            let db = bulkhead::db::connect_for_migrations(&settings.database_url).await?;
            use bulkhead_migrations::{Migrator, MigratorTrait};
            match action {
                MigrateAction::Up => Migrator::up(&db, None).await?,
                MigrateAction::Down { steps } => Migrator::down(&db, Some(steps)).await?,
                MigrateAction::Status => {
                    for migration in Migrator::get_migration_with_status(&db).await? {
                        println!("{:?}\t{}", migration.status(), migration.name());
                    }
                }
            }
        }
        Command::Openapi => {
            println!("{}", bulkhead::http::openapi_document().to_pretty_json()?);
        }
    }
    Ok(())
}
