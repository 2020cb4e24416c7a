//! The `bulkhead` command: `serve`, `dev`, `migrate`, `openapi`, `agent`, `hello`, and the
//! plugin authors' tools (`cli::plugin`).

mod cli;

use std::io::IsTerminal;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use cli::plugin::PluginAction;

use bulkhead::config::{LogFormat, ServeArgs, Settings};
#[cfg(feature = "dev")]
use bulkhead::dev::DevPlatform;

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
    /// Print the OpenAPI document (the committed copies are `openapi/openapi.json` and, in
    /// the 3.0 form that some generators need, `openapi/openapi-3.0.json`).
    Openapi {
        /// `3.1` (as the server serves it at `/openapi.json`) or `3.0`.
        #[arg(long = "openapi-version", default_value = "3.1", value_parser = ["3.1", "3.0"])]
        version: String,
    },
    /// Manage the master key that encrypts secrets at rest.
    Secrets {
        #[command(flatten)]
        args: ServeArgs,
        #[command(subcommand)]
        action: SecretsAction,
    },
    /// Run a complete local platform: the server with the bundled providers, a host agent and
    /// the GCP and AWS simulators, the providers configured to use them.
    #[cfg(feature = "dev")]
    Dev(DevArgs),
    /// A demo workload: answers every HTTP request on $PORT with its name.
    #[cfg(feature = "dev")]
    Hello {
        #[arg(long, env = "PORT", default_value_t = 8080)]
        port: u16,
        #[arg(long, env = "BULKHEAD_INSTANCE_KEY", default_value = "hello")]
        name: String,
    },
    /// Run the host agent of a machine of the platform's own fleet: workloads of the `metal`
    /// provider run here as supervised processes.
    Agent(AgentArgs),
    /// Run the edge agent next to a Caddy: keeps it routing by the signed routing table,
    /// from the last-known-good copy on disk when no control plane answers.
    Edge(bulkhead::edge::EdgeArgs),
    /// Play the account suspension that inspired Bulkhead against a local platform, with
    /// real Caddy in front, and check that nothing that must survive it fails.
    #[cfg(feature = "dev")]
    Drill(cli::drill::DrillArgs),
    /// Tools for plugin authors.
    Plugin {
        #[command(subcommand)]
        action: PluginAction,
    },
}

#[cfg(feature = "dev")]
#[derive(clap::Args)]
struct DevArgs {
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(clap::Args)]
struct AgentArgs {
    /// Address to listen on.
    #[arg(long, env = "BULKHEAD_AGENT_LISTEN", default_value = "127.0.0.1:7070")]
    listen: std::net::SocketAddr,
    /// Where the agent keeps its state and its workloads' logs.
    #[arg(long, env = "BULKHEAD_AGENT_DATA_DIR", default_value = "data/agent")]
    data_dir: std::path::PathBuf,
    /// Workloads this machine may run at once.
    #[arg(long, env = "BULKHEAD_AGENT_SLOTS", default_value_t = bulkhead_agent::DEFAULT_SLOTS)]
    slots: u32,
    /// Host name or IP put in workload addresses (how the platform reaches this machine).
    #[arg(long, env = "BULKHEAD_AGENT_ADVERTISE_HOST", default_value = bulkhead_agent::DEFAULT_ADVERTISE_HOST)]
    advertise_host: String,
    /// A file holding the agent's token (16+ characters), owned by the agent's user and
    /// readable by it alone (mode 0600); any other file is refused.
    #[arg(long, env = "BULKHEAD_AGENT_TOKEN_FILE")]
    token_file: std::path::PathBuf,
    /// The uids the workloads run as, FIRST-LAST, one per workload (at least as many as the
    /// slots). No account of the machine, and no other agent, may use them.
    #[arg(long, env = "BULKHEAD_AGENT_WORKLOAD_UIDS", default_value_t = bulkhead_agent::DEFAULT_WORKLOAD_UIDS)]
    workload_uids: bulkhead_agent::UidRange,
    /// When the agent is not root (and so cannot run workloads as users of their own), run
    /// them as its own user instead of refusing to start. INSECURE: a workload can then read
    /// the agent's token, its state (every workload's environment, secrets included) and the
    /// other workloads' logs. For a developer's machine only.
    #[arg(long)]
    insecure_same_user: bool,
}

#[derive(Subcommand)]
enum SecretsAction {
    /// Re-wrap the database's data keys with a new master key (nothing else changes, and an
    /// interrupted rotation loses nothing). Without --new-key-file, the data directory's key is
    /// replaced by a new one.
    RotateKey {
        /// Where the new key is (generated there, 0600, if the file does not exist).
        #[arg(long)]
        new_key_file: Option<std::path::PathBuf>,
    },
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
    // Colours only for a person at a terminal: not in files, pipes or CI logs.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, not when
/// the future is first polled, so a signal sent while the server starts is not lost.
#[cfg(unix)]
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {},
            _ = interrupt.recv() => {},
        }
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

/// What `bulkhead dev` prints once everything runs: where things are, and how to try them.
#[cfg(feature = "dev")]
fn dev_guide(server: &bulkhead::server::RunningServer, platform: &DevPlatform) {
    let hello = std::env::current_exe()
        .map(|exe| format!("{} hello", exe.display()))
        .unwrap_or_else(|_| "bulkhead hello".into());
    println!(
        r#"bulkhead listening on http://{addr}

A local platform is running:
  control plane   http://{addr}   (API reference: http://{addr}/docs/)
  gcp simulator   {gcp}   (faults: PUT {gcp}/_sim/faults '{{"suspended":true}}')
  aws simulator   {aws}
  host agent      {agent}
                  {isolation}
The providers gcp, aws and metal use them. With A="Authorization: Bearer <admin token>"
(BULKHEAD_BOOTSTRAP_TOKEN, or the token printed above on a first start):

  curl -s -H "$A" http://{addr}/v1/providers | jq '.items[] | {{name, state}}'
  curl -s -H "$A" -H 'Content-Type: application/json' http://{addr}/v1/providers/gcp/instances -d '{{"instance_key":"web-1","region":"{zone}","artifact":"shop/web:1","port":8080}}'
  curl -s -H "$A" -H 'Content-Type: application/json' http://{addr}/v1/providers/aws/instances -d '{{"instance_key":"web-1","region":"{region}","artifact":"ami-0bulkhead","port":8080}}'
  curl -s -H "$A" -H 'Content-Type: application/json' http://{addr}/v1/providers/metal/instances -d '{{"instance_key":"web-1","region":"local","artifact":"{hello}","port":8080}}'
  curl -s http://<the "address" of an answer>/        # the instance's own answer

Deploy a service of 3 replicas over the three (more in the README, "Deploying"):

  B=http://{addr}; J='Content-Type: application/json'
  P=$(curl -s -H "$A" -H "$J" $B/v1/projects -d '{{"name":"demo"}}' | jq -r .id)
  E=$(curl -s -H "$A" -H "$J" $B/v1/projects/$P/environments -d '{{"name":"production"}}' | jq -r .id)
  S=$(curl -s -H "$A" -H "$J" $B/v1/projects/$P/services -d '{{"environment_id":"'$E'","name":"web","port":8080,"replicas":3,"source":{{"type":"command","command":["python3","-m","http.server","$PORT"]}},"placement":{{"providers":[{{"name":"gcp"}},{{"name":"aws"}},{{"name":"metal"}}]}}}}' | jq -r .id)
  D=$(curl -s -H "$A" -X POST $B/v1/projects/$P/services/$S/deployments | jq -r .id)
  curl -sN -H "$A" -H 'Accept: text/event-stream' $B/v1/projects/$P/services/$S/deployments/$D/events
  curl -s -H "$A" $B/v1/projects/$P/services/$S/instances | jq '.items[] | {{provider, address, health}}'

Stop with Ctrl-C (the agent's workloads are stopped too)."#,
        addr = server.addr,
        gcp = platform.gcp.url(),
        aws = platform.aws.url(),
        agent = platform.agent.url(),
        isolation = platform.agent_isolation_note(),
        zone = bulkhead::dev::GCP_ZONE,
        region = bulkhead::dev::AWS_REGION,
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => {
            let settings = Settings::resolve(args)?;
            logging_init(settings.log_format);
            let stop = shutdown_signal()?;
            let server = bulkhead::server::start(settings).await?;
            println!("bulkhead listening on http://{}", server.addr);
            tracing::info!(addr = %server.addr, "listening");
            stop.await;
            tracing::info!("shutting down: finishing in-flight requests");
            server.shutdown().await?;
        }
        #[cfg(feature = "dev")]
        Command::Dev(DevArgs { mut serve }) => {
            serve.data_dir.get_or_insert_with(|| "data/dev".into());
            let settings = Settings::resolve(serve)?;
            logging_init(settings.log_format);
            let stop = shutdown_signal()?;
            std::fs::create_dir_all(&settings.data_dir)?;
            let platform = DevPlatform::start(&settings.data_dir).await?;
            let server = bulkhead::server::start(settings).await?;
            platform.providers_configure(&server.app).await?;
            dev_guide(&server, &platform);
            stop.await;
            tracing::info!("shutting down the local platform");
            server.shutdown().await?;
            platform.shutdown().await;
        }
        #[cfg(feature = "dev")]
        Command::Hello { port, name } => bulkhead::dev::hello_serve(port, name).await?,
        Command::Agent(args) => {
            logging_init(LogFormat::Text);
            // The token is a secret: from a private file, never a flag (every user sees a
            // process's command line) nor the environment.
            anyhow::ensure!(
                std::env::var_os("BULKHEAD_AGENT_TOKEN").is_none(),
                "BULKHEAD_AGENT_TOKEN is no longer read: put the token in a file only the \
                 agent's user can read (chmod 600), pass it as --token-file (or \
                 BULKHEAD_AGENT_TOKEN_FILE), and unset BULKHEAD_AGENT_TOKEN"
            );
            let token = bulkhead_agent::token_file_read(&args.token_file)?;
            let mut settings =
                bulkhead_agent::AgentSettings::new(args.listen, args.data_dir, token);
            settings.slots = args.slots;
            settings.advertise_host = args.advertise_host;
            settings.workload_uids = args.workload_uids;
            settings.insecure_same_user = args.insecure_same_user;
            let stop = shutdown_signal()?;
            let agent = bulkhead_agent::start(settings).await?;
            println!("bulkhead agent listening on {}", agent.url());
            println!("workloads: {}", agent.isolation);
            stop.await;
            // Workloads keep running: the next agent on this data directory adopts them.
            agent.shutdown().await;
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
        Command::Edge(args) => {
            logging_init(LogFormat::Text);
            let settings = bulkhead::edge::EdgeSettings::resolve(args)?;
            let stop = shutdown_signal()?;
            let edge = bulkhead::edge::start(settings).await?;
            println!(
                "bulkhead edge: /metrics and /healthz on http://{}",
                edge.addr
            );
            stop.await;
            edge.shutdown().await;
        }
        #[cfg(feature = "dev")]
        Command::Drill(args) => {
            if std::env::var_os("RUST_LOG").is_some() {
                logging_init(LogFormat::Text);
            }
            if !cli::drill::drill_command(args).await? {
                std::process::exit(1);
            }
        }
        Command::Plugin { action } => {
            logging_init(LogFormat::Text);
            cli::plugin::plugin_command(action).await?;
        }
        Command::Secrets {
            args,
            action: SecretsAction::RotateKey { new_key_file },
        } => {
            let settings = Settings::resolve(args)?;
            logging_init(settings.log_format);
            let report =
                bulkhead::secrets::master_key_rotate_command(&settings, new_key_file.as_deref())
                    .await?;
            println!("{report}");
        }
        Command::Openapi { version } => {
            let doc = match version.as_str() {
                "3.0" => serde_json::to_string_pretty(&bulkhead::http::openapi_document_v30()?)?,
                _ => bulkhead::http::openapi_document().to_pretty_json()?,
            };
            println!("{doc}");
        }
    }
    Ok(())
}
