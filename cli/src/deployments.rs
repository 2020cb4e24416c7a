//! `bulkhead deploy` (deploy a service's current spec and, unless `--detach`, follow it to its
//! end) and `bulkhead deployments` (list, show, events, cancel, rollback). Following is
//! [`super::follow`]; here only which operation each command is, and what its end means for
//! the exit status.

use bulkhead_client::types;
use clap::Subcommand;
use uuid::Uuid;

use super::connection::{Connection, GlobalArgs};
use super::exit::{Exit, fail};
use super::follow::{deployment_call, deployment_follow, deployment_view, event_print};
use super::listing::{Paging, list_pages};
use super::output::{self, OutputFormat, Row, optional};
use super::resolve;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead deploy -p shop -s web                 # follows the rollout; exit 0 when healthy
  bulkhead deploy -p shop -s web --detach        # prints the deployment and returns
  bulkhead deploy -p shop -s web --commit 3f9a1c0e...  # that commit (full id)

Without --commit, a service bound to a branch deploys the latest commit pushed to it.")]
pub struct DeployArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(flatten)]
    target: ServiceTarget,
    /// The commit to deploy (its full id); an image naming `{commit}` gets it filled in.
    #[arg(long)]
    commit: Option<String>,
    /// Return once the deployment is queued instead of following it.
    #[arg(long)]
    detach: bool,
}

/// A service, by its project and itself (names or ids).
#[derive(clap::Args, Clone)]
pub struct ServiceTarget {
    /// The project (name or id).
    #[arg(short, long)]
    project: String,
    /// The service (name or id).
    #[arg(short, long)]
    service: String,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead deployments list -p shop -s web
  bulkhead deployments events -p shop -s web 0192f3c4-... --follow
  bulkhead deployments rollback -p shop -s web")]
pub struct DeploymentsArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: DeploymentsAction,
}

#[derive(Subcommand)]
pub enum DeploymentsAction {
    /// A service's deployments, newest first.
    #[command(after_help = "Example:\n  bulkhead deployments list -p shop -s web")]
    List {
        #[command(flatten)]
        target: ServiceTarget,
        #[command(flatten)]
        paging: Paging,
    },
    /// A deployment with its instances.
    #[command(after_help = "Example:\n  bulkhead deployments show -p shop -s web 0192f3c4-...")]
    Show {
        #[command(flatten)]
        target: ServiceTarget,
        deployment: Uuid,
    },
    /// A deployment's events; with --follow, until it ends.
    #[command(
        after_help = "Example:\n  bulkhead deployments events -p shop -s web 0192f3c4-... --follow"
    )]
    Events {
        #[command(flatten)]
        target: ServiceTarget,
        deployment: Uuid,
        /// Follow new events until the deployment ends (exit 9 unless it became healthy).
        #[arg(long)]
        follow: bool,
    },
    /// Cancel a deployment that has not finished.
    #[command(after_help = "Example:\n  bulkhead deployments cancel -p shop -s web 0192f3c4-...")]
    Cancel {
        #[command(flatten)]
        target: ServiceTarget,
        deployment: Uuid,
    },
    /// Deploy again the spec of the last deployment before the latest that became healthy,
    /// and follow it (unless --detach).
    #[command(after_help = "Example:\n  bulkhead deployments rollback -p shop -s web")]
    Rollback {
        #[command(flatten)]
        target: ServiceTarget,
        /// Roll back from this deployment instead of the latest.
        #[arg(long)]
        from: Option<Uuid>,
        #[arg(long)]
        detach: bool,
    },
}

impl Row for types::DeploymentView {
    const HEADER: &'static [&'static str] = &[
        "ID", "NUMBER", "STATE", "COMMIT", "REASON", "CREATED", "FINISHED",
    ];
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.number.to_string(),
            self.state.to_string(),
            optional(
                self.revision
                    .as_ref()
                    .map(|revision| revision.commit.chars().take(7).collect::<String>()),
            ),
            self.reason.clone(),
            self.created_at.to_rfc3339(),
            optional(self.finished_at.map(|at| at.to_rfc3339())),
        ]
    }
}

/// The ids of a service named on the command line.
pub(super) struct Service {
    pub(super) project: Uuid,
    pub(super) service: Uuid,
}

impl ServiceTarget {
    pub(super) async fn resolve(&self, connection: &Connection) -> anyhow::Result<Service> {
        let (project, service) =
            resolve::project_and_service(connection, &self.project, &self.service).await?;
        Ok(Service { project, service })
    }
}

pub async fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let target = args.target.resolve(&connection).await?;
    let commit = match args
        .commit
        .as_deref()
        .map(types::DeploymentCreateCommit::try_from)
        .transpose()
    {
        Ok(commit) => commit,
        Err(_) => {
            return fail(
                Exit::Usage,
                "--commit must be a full commit id: 40 or 64 lowercase hex digits",
            );
        }
    };
    let created = connection
        .call(async |c| {
            let mut create = c
                .deployment_create()
                .project_id(target.project)
                .service_id(target.service);
            if let Some(commit) = &commit {
                create = create.commit(commit.clone());
            }
            create.send().await
        })
        .await?;
    settle(&connection, &target, created, args.detach).await
}

pub async fn deployments(args: DeploymentsArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    match args.action {
        DeploymentsAction::List { target, paging } => {
            let target = target.resolve(&connection).await?;
            list_pages!(connection, paging.all, |c| c
                .deployment_list()
                .project_id(target.project)
                .service_id(target.service)
                .order(types::ListOrder::Desc))
            .print(format);
        }
        DeploymentsAction::Show { target, deployment } => {
            let target = target.resolve(&connection).await?;
            let view =
                deployment_view(&connection, target.project, target.service, deployment).await?;
            output::one(format, &view);
        }
        DeploymentsAction::Events {
            target,
            deployment,
            follow,
        } => {
            let target = target.resolve(&connection).await?;
            if follow {
                let ended =
                    deployment_follow(&connection, target.project, target.service, deployment)
                        .await?;
                return outcome(format, &ended);
            }
            let page = deployment_call!(
                connection,
                target.project,
                target.service,
                deployment,
                deployment_event_list
            )?;
            match format {
                OutputFormat::Json => output::json(&page),
                OutputFormat::Table => page
                    .items
                    .iter()
                    .for_each(|event| event_print(format, event)),
            }
        }
        DeploymentsAction::Cancel { target, deployment } => {
            let target = target.resolve(&connection).await?;
            let cancelled = deployment_call!(
                connection,
                target.project,
                target.service,
                deployment,
                deployment_cancel
            )?;
            output::one(format, &cancelled);
        }
        DeploymentsAction::Rollback {
            target,
            from,
            detach,
        } => {
            let target = target.resolve(&connection).await?;
            let from = match from {
                Some(from) => from,
                None => latest_deployment(&connection, &target).await?,
            };
            let created = deployment_call!(
                connection,
                target.project,
                target.service,
                from,
                deployment_rollback
            )?;
            settle(&connection, &target, created, detach).await?;
        }
    }
    Ok(())
}

/// Prints a deployment just made and, unless `detach`, follows it to its end.
async fn settle(
    connection: &Connection,
    target: &Service,
    created: types::DeploymentView,
    detach: bool,
) -> anyhow::Result<()> {
    let format = connection.args.output;
    if detach {
        output::one(format, &created);
        return Ok(());
    }
    if format == OutputFormat::Table {
        output::done(format!(
            "Deployment #{} ({}) queued; following it (Ctrl-C stops watching, not the deployment).",
            created.number, created.id
        ));
    }
    let ended = deployment_follow(connection, target.project, target.service, created.id).await?;
    outcome(format, &ended)
}

/// Prints how a deployment ended: success when healthy, [`Exit::DeploymentUnhealthy`] otherwise.
fn outcome(format: OutputFormat, ended: &types::DeploymentView) -> anyhow::Result<()> {
    match format {
        OutputFormat::Json => println!("{}", serde_json::to_string(ended)?),
        OutputFormat::Table => output::done(format!(
            "Deployment #{} ended {}{}",
            ended.number,
            ended.state,
            if ended.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", ended.reason)
            }
        )),
    }
    if ended.state == types::DeploymentState::Healthy {
        Ok(())
    } else {
        fail(
            Exit::DeploymentUnhealthy,
            format!("deployment #{} ended {}", ended.number, ended.state),
        )
    }
}

/// The service's newest deployment.
async fn latest_deployment(connection: &Connection, target: &Service) -> anyhow::Result<Uuid> {
    let latest = connection
        .call(async |c| {
            c.deployment_list()
                .project_id(target.project)
                .service_id(target.service)
                .order(types::ListOrder::Desc)
                .limit(1)
                .send()
                .await
        })
        .await?
        .items
        .first()
        .map(|d| d.id);
    match latest {
        Some(id) => Ok(id),
        None => fail(
            Exit::NotFound,
            "the service has no deployment to roll back from",
        ),
    }
}
