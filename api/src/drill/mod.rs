//! `bulkhead drill`: the account suspension that inspired Bulkhead, played on one machine
//! against real components — a control plane (a child process it kills), the GCP and AWS
//! simulators, a host agent, an edge agent in front of a real Caddy and an ACME CA (Pebble)
//! — with HTTPS traffic through the edge all along. It prints a timeline as it goes and a
//! pass/fail table with the measured figures at the end (`--output json` for scripts), and
//! exits 1 when any check fails.
//!
//! With `--replicas N` (PostgreSQL), the control plane is N replicas behind a Caddy load
//! balancer, and the control-plane phase kills the deploys' leader under API traffic instead
//! of the only control plane ([`replica_kill`]). With `--database-failover`, the drill runs
//! two PostgreSQL servers of its own in synchronous replication, and the database's primary is
//! killed and its standby promoted under API traffic ([`database_failover`]).
//!
//! [`stack`] runs the components, [`fleet`] makes the tenants and services through the API,
//! [`traffic`] sends the requests through the edge and [`api_traffic`] through the balancer,
//! [`phases`] plays the outage and answers the checks, [`forge`] the pushes that pile up at
//! a forge meanwhile and its limits when the control plane is back, [`sign_in_crowd`] the
//! users who sign in through it then, [`records`] compares the user records, [`report`]
//! renders the result.

mod api_traffic;
mod database_failover;
mod fleet;
mod forge;
mod phases;
mod records;
mod replica_kill;
mod report;
mod sign_in_crowd;
mod stack;
mod traffic;
mod wait;

use std::path::PathBuf;
use std::time::Duration;

use bulkhead::dev::{DevPlatform, secret_random};
use bulkhead_client::{Client, types};

use fleet::Fleet;
use phases::Drill;
use records::Records;
use report::{Check, Report, Timeline};
use sign_in_crowd::SignInCrowd;
use stack::{ApiFront, ControlPlane, ControlPlaneSettings, Edge, workload_binary_copy};
use traffic::Traffic;

/// `bulkhead drill` flags.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  bulkhead drill                          # the full drill, about two minutes
  bulkhead drill --services 2 --outage-secs 5 --backlog 8
  bulkhead drill --output json | jq '.checks[] | select(.passed | not)'
  bulkhead drill --database-url postgres://postgres@127.0.0.1/drill
  bulkhead drill --database-url postgres://postgres@127.0.0.1/drill --replicas 3
  bulkhead drill --database-failover --replicas 3

Needs Caddy 2.6+ and Pebble (`apt-get install caddy pebble`); --database-failover needs PostgreSQL's
server programs (`apt-get install postgresql`). Exit status: 0 when every check passed, 1 when
one failed or the drill could not run.")]
pub struct DrillArgs {
    /// Services deployed over gcp, aws and metal (three replicas each, one domain each).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    services: u32,
    /// Seconds the control plane stays killed.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(2..=600))]
    outage_secs: u64,
    /// Deploys queued for when the control plane comes back.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(2..=200))]
    backlog: u32,
    /// The pace the backlog must drain at: provider operations a second.
    #[arg(long, default_value_t = 4.0)]
    drain_rate: f64,
    /// The control plane's database (default: SQLite in the drill's directory). Use an empty
    /// database: the drill makes its own users and projects.
    #[arg(long, conflicts_with = "database_failover")]
    database_url: Option<String>,
    /// The database's cloud is suspended too: the drill runs a PostgreSQL primary and a
    /// synchronous standby of its own (initdb, pg_basebackup), gives the control plane both,
    /// kills the primary under API traffic and promotes the standby 2 s later.
    #[arg(long)]
    database_failover: bool,
    /// Control-plane replicas, behind a Caddy load balancer (more than one needs a PostgreSQL
    /// `--database-url`, or `--database-failover`). With several, the leader of the deploys is
    /// killed under API traffic instead of the only control plane, and started again after
    /// `--outage-secs`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=5))]
    replicas: u32,
    /// Where the drill keeps its state (default: a new temporary directory, removed when
    /// every check passed).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The Caddy binary.
    #[arg(long, default_value = "caddy")]
    caddy: PathBuf,
    /// `table` for people, `json` for scripts (on stdout; the timeline goes to stderr).
    #[arg(long, value_parser = ["table", "json"], default_value = "table")]
    output: String,
}

/// What the phases need of the flags.
pub struct DrillSettings {
    pub backlog: u32,
    pub drain_rate: f64,
    pub outage: Duration,
}

/// Runs the drill and prints its report; an error when a check failed (exit status 1).
pub async fn drill_command(args: DrillArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.drain_rate > 0.0 && args.drain_rate <= 100.0,
        "--drain-rate must be more than 0 and at most 100"
    );
    anyhow::ensure!(
        args.replicas == 1
            || args.database_failover
            || args.database_url.as_deref().is_some_and(
                |url| url.starts_with("postgres://") || url.starts_with("postgresql://")
            ),
        "--replicas {} needs a PostgreSQL --database-url: replicas share their database",
        args.replicas
    );
    // The components in this process log only when asked to (RUST_LOG): the timeline is the
    // drill's own output.
    if std::env::var_os("RUST_LOG").is_some() {
        bulkhead_common::process::logging_init(false);
    }
    bulkhead::dev::caddy::caddy_check(&args.caddy)?;
    bulkhead::dev::acme::acme_check()?;
    if args.database_failover {
        bulkhead::dev::postgres::postgres_bin()?;
    }
    let started_at = chrono::Utc::now();
    let timeline = Timeline::new();
    let (dir, keep_dir) = match &args.dir {
        Some(dir) => (dir.clone(), true),
        None => (
            std::env::temp_dir().join(format!(
                "bulkhead-drill-{}",
                started_at.format("%Y%m%dT%H%M%S")
            )),
            false,
        ),
    };
    std::fs::create_dir_all(&dir)?;
    let settings = DrillSettings {
        backlog: args.backlog,
        drain_rate: args.drain_rate,
        outage: Duration::from_secs(args.outage_secs),
    };
    let mut checks = Vec::new();
    if let Err(error) = drill_phases(&args, &settings, &dir, &timeline, &mut checks).await {
        timeline.note(format!("the drill stopped: {error:#}"));
        checks.push(Check::new(
            "drill_completes",
            "every phase runs to its end",
            false,
            format!("{error:#}"),
            serde_json::json!({ "error": format!("{error:#}") }),
        ));
    }
    let report = Report::new(
        started_at,
        &timeline,
        serde_json::json!({
            "services": args.services,
            "outage_secs": args.outage_secs,
            "backlog": args.backlog,
            "drain_rate": args.drain_rate,
            "database": match (args.database_failover, &args.database_url) {
                (true, _) => "postgres (primary and synchronous standby, failed over)",
                (false, Some(_)) => "postgres",
                (false, None) => "sqlite",
            },
            "replicas": args.replicas,
        }),
        checks,
        dir.display().to_string(),
    );
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.table());
    }
    if report.passed && !keep_dir {
        let _ = std::fs::remove_dir_all(&dir);
    } else if !report.passed {
        eprintln!(
            "the drill's state and the control plane's log are in {}",
            dir.display()
        );
    }
    anyhow::ensure!(
        report.passed,
        "the drill failed: {} of {} checks passed",
        report.checks.iter().filter(|c| c.passed).count(),
        report.checks.len()
    );
    Ok(())
}

/// The drill's phases, each adding its checks to `checks` as it ends.
async fn drill_phases(
    args: &DrillArgs,
    settings: &DrillSettings,
    dir: &std::path::Path,
    timeline: &Timeline,
    checks: &mut Vec<Check>,
) -> anyhow::Result<()> {
    let workload_binary = workload_binary_copy()?;
    let platform = DevPlatform::start(&dir.join("platform")).await?;
    let outcome = drill_on_platform(
        args,
        settings,
        dir,
        timeline,
        checks,
        &platform,
        &workload_binary,
    )
    .await;
    // The agent's workloads are stopped whatever happened.
    platform.shutdown().await;
    let _ = std::fs::remove_dir_all(workload_binary.parent().unwrap_or(&workload_binary));
    outcome
}

async fn drill_on_platform(
    args: &DrillArgs,
    settings: &DrillSettings,
    dir: &std::path::Path,
    timeline: &Timeline,
    checks: &mut Vec<Check>,
    platform: &DevPlatform,
    workload_binary: &std::path::Path,
) -> anyhow::Result<()> {
    let admin_token = secret_random(40);
    // The forge serves first: the control plane's configuration names it.
    let forge = forge::Forge::start().await?;
    let config_file = dir.join("control-plane.toml");
    std::fs::write(&config_file, forge.control_plane_config())?;
    let postgres = match args.database_failover {
        true => {
            let postgres = bulkhead::dev::postgres::ReplicatedPostgres::start(
                &dir.join("database"),
                bulkhead::dev::postgres::Replication::Synchronous,
            )
            .await?;
            timeline.note(format!(
                "PostgreSQL primary on 127.0.0.1:{} with a synchronous standby on 127.0.0.1:{}",
                postgres.primary.port(),
                postgres.standby.port()
            ));
            Some(postgres)
        }
        false => None,
    };
    let database_url = postgres
        .as_ref()
        .map(|postgres| postgres.url())
        .or_else(|| args.database_url.clone());
    let (mut replicas, front) = control_plane_start(
        args,
        database_url,
        dir,
        &admin_token,
        &config_file,
        platform,
        timeline,
    )
    .await?;
    let replica_urls: Vec<String> = replicas.iter().map(ControlPlane::url).collect();
    let base_url = front
        .as_ref()
        .map_or_else(|| replica_urls[0].clone(), ApiFront::url);
    timeline.note(format!(
        "control plane on {base_url}, simulators on {} and {}, agent on {}",
        platform.gcp.url(),
        platform.aws.url(),
        platform.agent.url()
    ));
    let admin = Client::with_token(&base_url, &admin_token)?;
    fleet::providers_configure(&admin, platform).await?;
    let fleet = Fleet::create(&base_url, admin, platform, workload_binary, args.services).await?;
    timeline.note(format!(
        "{} services of 3 replicas deployed over gcp, aws and metal",
        fleet.services.len()
    ));

    let routing_token = fleet
        .admin
        .token_create()
        .body_map(|b| b.name("drill-edge").scopes(vec![types::Scope::RoutingRead]))
        .send()
        .await?
        .into_inner()
        .secret;
    let keys = fleet.admin.routing_key_list().send().await?.into_inner();
    // The edge syncs from every replica, the next when one fails.
    let mut edge = Edge::start(
        &args.caddy,
        &dir.join("edge"),
        &replica_urls,
        &routing_token,
        &serde_json::to_vec(&keys)?,
    )
    .await?;
    let address = traffic::EdgeAddress {
        https_port: edge.https_port,
        root: edge.root.clone(),
    };
    let issuing = std::time::Instant::now();
    traffic::all_answer(&address, &fleet.domains, Duration::from_secs(60)).await?;
    timeline.note(format!(
        "the edge serves {} domains over HTTPS through Caddy on 127.0.0.1:{}, certificates \
         from the ACME CA in {:.1} s",
        fleet.domains.len(),
        edge.https_port,
        issuing.elapsed().as_secs_f64()
    ));
    let traffic = Traffic::start(
        timeline.clock,
        &address,
        fleet.domains.clone(),
        Duration::from_millis(20),
    )?;
    let mut crowd = SignInCrowd::prepare(&base_url, &fleet.admin).await?;
    timeline.note(format!(
        "{} users linked their forge accounts, {} of them signed in through it",
        sign_in_crowd::CROWD,
        sign_in_crowd::CROWD / 2
    ));
    let records = Records::read(&fleet.admin, fleet.project, &fleet.users).await?;
    timeline.note(format!("user records read: {}", records.counts()));
    let backlog = forge::ForgeBacklog::install(&forge, &fleet, &base_url).await?;
    timeline.note(format!(
        "a forge's webhook deploys {} branches; its pushes wait out the outage",
        forge::PUSHES
    ));

    let drill = Drill {
        settings,
        timeline,
        platform,
        fleet: &fleet,
        traffic: &traffic,
    };
    let outcome = async {
        checks.extend(drill.gcp_suspended().await?);
        if replicas.len() > 1 {
            checks.extend(drill.replica_killed(&mut replicas, &base_url).await?);
        } else {
            checks.extend(
                drill
                    .control_plane_killed(&mut replicas[0], &mut edge)
                    .await?,
            );
        }
        if let Some(postgres) = &postgres {
            checks.extend(
                drill
                    .database_failed_over(&replicas, &base_url, postgres, &admin_token)
                    .await?,
            );
        }
        checks.extend(
            forge
                .returns(&backlog, &mut crowd, &fleet, timeline)
                .await?,
        );
        checks.extend(drill.gcp_restored().await?);
        checks.push(drill.records_intact(&records).await?);
        anyhow::Ok(())
    }
    .await;
    traffic.stop().await;
    forge.shutdown().await;
    edge.shutdown().await;
    for replica in &mut replicas {
        replica.kill();
    }
    drop(front);
    outcome
}

/// Starts the control plane: `--replicas` processes at once (so that their migrations meet:
/// one waits for the other) sharing one master key, and with several, a Caddy in front.
async fn control_plane_start(
    args: &DrillArgs,
    database_url: Option<String>,
    dir: &std::path::Path,
    admin_token: &str,
    config_file: &std::path::Path,
    platform: &DevPlatform,
    timeline: &Timeline,
) -> anyhow::Result<(Vec<ControlPlane>, Option<ApiFront>)> {
    let mut process = ControlPlaneSettings {
        program: std::env::current_exe()?,
        database_url,
        admin_token: admin_token.to_owned(),
        secret_key_file: None,
        dns_resolver: Some(platform.dns.dns_addr),
        config_file: Some(config_file.to_owned()),
    };
    if args.replicas > 1 {
        // Replicas share the master key of secrets at rest, as they share the database.
        let key_file = dir.join("secret.key");
        let (_, key) = bulkhead::secrets::MasterKey::generate();
        bulkhead::secrets::key_file_write(&key_file, &key)?;
        process.secret_key_file = Some(key_file);
    }
    let mut replicas = (1..=args.replicas)
        .map(|n| {
            let name = if args.replicas == 1 {
                "control-plane".to_owned()
            } else {
                format!("control-plane-{n}")
            };
            ControlPlane::spawned(&process, &dir.join(name))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for replica in &mut replicas {
        replica.ready().await?;
    }
    if args.replicas == 1 {
        return Ok((replicas, None));
    }
    let ports: Vec<u16> = replicas.iter().map(ControlPlane::port).collect();
    let front = ApiFront::start(&args.caddy, &dir.join("front"), &ports).await?;
    timeline.note(format!(
        "{} control-plane replicas on {}, behind Caddy on {}",
        replicas.len(),
        replicas
            .iter()
            .map(ControlPlane::url)
            .collect::<Vec<_>>()
            .join(", "),
        front.url()
    ));
    Ok((replicas, Some(front)))
}
