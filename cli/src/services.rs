//! `bulkhead services`: list, create, show, update and delete a project's services. A service is what
//! `bulkhead deploy` deploys: its source (an image, a command, or a command run in the code of a
//! git repository), port, replicas and the providers it may be placed on.

use bulkhead_client::types;
use clap::Subcommand;

use super::connection::{Connection, GlobalArgs};
use super::exit::{Exit, fail};
use super::listing::{Paging, list_pages};
use super::output::{self, Row};
use super::resolve;

#[derive(clap::Args)]
#[command(after_help = "Example, from scratch:
  bulkhead projects create shop
  bulkhead projects environments create -p shop production
  bulkhead services create -p shop --environment production --name web \\
      --command 'python3 -m http.server $PORT' --port 8080 --replicas 2 --size 500:512 \\
      --provider aws --provider metal
  bulkhead deploy -p shop -s web")]
pub struct ServicesArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: ServicesAction,
}

#[derive(Subcommand)]
pub enum ServicesAction {
    /// List a project's services.
    #[command(after_help = "Example:\n  bulkhead services list -p shop")]
    List {
        /// The project (name or id).
        #[arg(short, long)]
        project: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// Create a service (it runs nothing until deployed).
    #[command(after_help = "Examples:
  bulkhead services create -p shop --environment production --name web --image shop/web:1 --port 8080
  bulkhead services create -p shop --environment production --name api \\
      --command 'python3 -m http.server $PORT' --port 8080 --provider metal
  bulkhead services create -p shop --environment production --name app --provider metal \\
      --git https://github.com/acme/app.git --build 'npm ci' --command 'node server.js' --port 8080")]
    Create(ServiceCreateArgs),
    /// Show a service.
    #[command(after_help = "Example:\n  bulkhead services show -p shop web")]
    Show {
        #[arg(short, long)]
        project: String,
        /// The service (name or id).
        service: String,
    },
    /// Change a service's spec: what is not given stays as it is. Deploy to apply it.
    #[command(after_help = "Examples:
  bulkhead services update -p shop web --replicas 3
  bulkhead services update -p shop web --size 2000:4096
  bulkhead services update -p shop web --image shop/web:2 --provider aws --provider gcp
  bulkhead deploy -p shop -s web")]
    Update(ServiceUpdateArgs),
    /// Delete a service and its domains (its instances must be gone: deploy 0 replicas first).
    #[command(after_help = "Example:\n  bulkhead services delete -p shop web")]
    Delete {
        #[arg(short, long)]
        project: String,
        service: String,
    },
}

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["image", "command"]))]
pub struct ServiceCreateArgs {
    /// The project (name or id).
    #[arg(short, long)]
    project: String,
    /// The environment (name or id).
    #[arg(long)]
    environment: String,
    /// The service's name: lowercase letters, digits and `-`.
    #[arg(long)]
    name: String,
    /// A packaged artifact to run, e.g. an OCI image reference.
    #[arg(long)]
    image: Option<String>,
    /// A command line to run, split like a shell would (`$PORT` is the port to listen on).
    #[arg(long)]
    command: Option<String>,
    #[command(flatten)]
    git: GitArgs,
    /// The port the service listens on.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65535))]
    port: u32,
    /// How many instances to run.
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    replicas: Option<i32>,
    /// What each instance gets, as CPU_MILLIS:MEMORY_MIB (e.g. 500:512: half a vCPU and
    /// 512 MiB; default: the server's default size).
    #[arg(long, value_parser = size_parse)]
    size: Option<types::ServiceSize>,
    /// A provider it may be placed on, in order of preference (repeatable; default: any).
    #[arg(long = "provider")]
    providers: Vec<String>,
}

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("source").args(["image", "command"]))]
pub struct ServiceUpdateArgs {
    /// The project (name or id).
    #[arg(short, long)]
    project: String,
    /// The service (name or id).
    service: String,
    /// A new artifact to run, e.g. an OCI image reference.
    #[arg(long)]
    image: Option<String>,
    /// A new command line to run, split like a shell would.
    #[arg(long)]
    command: Option<String>,
    #[command(flatten)]
    git: GitArgs,
    /// A new port.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65535))]
    port: Option<u32>,
    /// A new number of instances.
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    replicas: Option<i32>,
    /// A new size for each instance, as CPU_MILLIS:MEMORY_MIB (deploy to roll it out).
    #[arg(long, value_parser = size_parse)]
    size: Option<types::ServiceSize>,
    /// The providers it may be placed on, in order of preference (repeatable; replaces them all).
    #[arg(long = "provider")]
    providers: Vec<String>,
}

/// A command run in the code of one commit of a git repository (with `--command`).
#[derive(clap::Args)]
pub struct GitArgs {
    /// Run `--command` in the code of a git repository (`https://`, `http://` or `git://`):
    /// each deployment fetches and builds its commit where it runs (metal).
    #[arg(
        long = "git",
        value_name = "URL",
        requires = "command",
        conflicts_with = "image"
    )]
    repository: Option<String>,
    /// With --git: a command line run in the code before --command (e.g. `npm ci`).
    #[arg(long, requires = "repository")]
    build: Option<String>,
    /// With --git: the secret variable of the service that holds a read token (https only).
    #[arg(long, value_name = "NAME", requires = "repository")]
    token_variable: Option<String>,
}

impl Row for types::ServiceView {
    const HEADER: &'static [&'static str] = &[
        "ID",
        "NAME",
        "ENVIRONMENT",
        "SOURCE",
        "PORT",
        "REPLICAS",
        "SIZE",
    ];
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.name.clone(),
            self.environment_id.to_string(),
            source_text(&self.source),
            self.port.to_string(),
            self.replicas.to_string(),
            size_text(&self.size),
        ]
    }
}

/// `500m CPU, 512 MiB`.
fn size_text(size: &types::ServiceSize) -> String {
    format!("{}m CPU, {} MiB", size.cpu_millis, size.memory_mib)
}

/// `CPU_MILLIS:MEMORY_MIB`; the server checks the bounds (its operator's).
fn size_parse(text: &str) -> Result<types::ServiceSize, String> {
    let (cpu, memory) = text
        .split_once(':')
        .ok_or_else(|| format!("`{text}` is not CPU_MILLIS:MEMORY_MIB (e.g. 500:512)"))?;
    let number = |part: &str| {
        part.trim()
            .parse::<i32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("`{text}` is not CPU_MILLIS:MEMORY_MIB (e.g. 500:512)"))
    };
    Ok(types::ServiceSize {
        cpu_millis: number(cpu)?,
        memory_mib: number(memory)?,
    })
}

fn source_text(source: &types::ServiceSource) -> String {
    match source {
        types::ServiceSource::Artifact { image } => image.to_string(),
        types::ServiceSource::Command { command } => shell_words::join(command),
        types::ServiceSource::Git {
            repository,
            command,
            ..
        } => format!("{} @ {}", shell_words::join(command), repository.as_str()),
    }
}

pub async fn services(args: ServicesArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    match args.action {
        ServicesAction::List { project, paging } => {
            let project = resolve::project_id(&connection, &project).await?;
            list_pages!(connection, paging.all, |c| c
                .service_list()
                .project_id(project))
            .print(format);
        }
        ServicesAction::Create(create) => {
            let service = service_create(&connection, create).await?;
            output::one(format, &service);
        }
        ServicesAction::Update(update) => {
            let service = service_update(&connection, update).await?;
            output::one(format, &service);
        }
        ServicesAction::Show { project, service } => {
            let (project, service) =
                resolve::project_and_service(&connection, &project, &service).await?;
            let service = connection
                .call(async |c| {
                    c.service_view()
                        .project_id(project)
                        .service_id(service)
                        .send()
                        .await
                })
                .await?;
            output::one(format, &service);
        }
        ServicesAction::Delete {
            project,
            service: name,
        } => {
            let (project, service) =
                resolve::project_and_service(&connection, &project, &name).await?;
            connection
                .call(async |c| {
                    c.service_delete()
                        .project_id(project)
                        .service_id(service)
                        .send()
                        .await
                })
                .await?;
            output::done(format!("Deleted service {name}."));
        }
    }
    Ok(())
}

/// The words of a command line given in `flag`.
fn words_of(flag: &str, line: &str) -> anyhow::Result<Vec<String>> {
    match shell_words::split(line) {
        Ok(words) if !words.is_empty() => Ok(words),
        _ => fail(
            Exit::InvalidInput,
            format!("{flag} `{line}` is not a command line"),
        ),
    }
}

/// The source `--image`, `--command` or `--git` with `--command` give, if any.
fn source_of(
    image: Option<String>,
    command: Option<String>,
    git: GitArgs,
) -> anyhow::Result<Option<types::ServiceSource>> {
    if let (Some(repository), Some(command)) = (git.repository, &command) {
        let Ok(repository) = repository.parse() else {
            return fail(
                Exit::InvalidInput,
                format!("--git `{repository}` is not an https://, http:// or git:// URL"),
            );
        };
        let token_variable = match git.token_variable.map(|name| name.parse()).transpose() {
            Ok(name) => name,
            Err(_) => {
                return fail(
                    Exit::InvalidInput,
                    "--token-variable must be a variable name ([A-Z_][A-Z0-9_]*)",
                );
            }
        };
        return Ok(Some(types::ServiceSource::Git {
            repository,
            build: git
                .build
                .map(|build| words_of("--build", &build))
                .transpose()?,
            command: words_of("--command", command)?,
            token_variable,
        }));
    }
    match (image, command) {
        (Some(image), _) => match image.parse() {
            Ok(image) => Ok(Some(types::ServiceSource::Artifact { image })),
            Err(_) => fail(
                Exit::InvalidInput,
                format!("--image `{image}` must be 1 to 500 characters, not all blank"),
            ),
        },
        (None, Some(command)) => Ok(Some(types::ServiceSource::Command {
            command: words_of("--command", &command)?,
        })),
        (None, None) => Ok(None),
    }
}

/// The placement `--provider` flags give (`None` without any).
fn placement_of(providers: &[String]) -> Option<types::PlacementPolicy> {
    (!providers.is_empty()).then(|| types::PlacementPolicy {
        providers: providers
            .iter()
            .map(|name| types::ProviderPreference {
                name: name.clone(),
                priority: None,
                regions: vec![],
                weight: None,
            })
            .collect(),
        spread: None,
    })
}

async fn service_create(
    connection: &Connection,
    args: ServiceCreateArgs,
) -> anyhow::Result<types::ServiceView> {
    let source =
        source_of(args.image, args.command, args.git)?.expect("clap requires --image or --command");
    let placement = placement_of(&args.providers);
    let project = resolve::project_id(connection, &args.project).await?;
    let environment = resolve::environment_id(connection, project, &args.environment).await?;
    connection
        .call(async |c| {
            c.service_create()
                .project_id(project)
                .body_map(|b| {
                    b.environment_id(environment)
                        .name(args.name.clone())
                        .port(args.port)
                        .replicas(args.replicas)
                        .source(source.clone())
                        .placement(placement.clone())
                        .size(args.size.clone())
                })
                .send()
                .await
        })
        .await
}

async fn service_update(
    connection: &Connection,
    args: ServiceUpdateArgs,
) -> anyhow::Result<types::ServiceView> {
    let source = source_of(args.image, args.command, args.git)?;
    let placement = placement_of(&args.providers);
    let port = args.port.and_then(std::num::NonZeroU32::new);
    if source.is_none()
        && placement.is_none()
        && port.is_none()
        && args.replicas.is_none()
        && args.size.is_none()
    {
        return fail(
            Exit::InvalidInput,
            "nothing to change: give --image, --command, --port, --replicas, --size or --provider",
        );
    }
    let (project, service) =
        resolve::project_and_service(connection, &args.project, &args.service).await?;
    connection
        .call(async |c| {
            c.service_update()
                .project_id(project)
                .service_id(service)
                .body_map(|b| {
                    b.source(source.clone())
                        .placement(placement.clone())
                        .port(port)
                        .replicas(args.replicas)
                        .size(args.size.clone())
                })
                .send()
                .await
        })
        .await
}
