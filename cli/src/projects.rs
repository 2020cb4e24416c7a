//! `bulkhead projects` and their environments: list, create, show and delete projects; list
//! and create a project's environments. Thin: each command is one or two operations of the
//! generated client and one call of the output renderer.

use bulkhead_client::types;
use clap::Subcommand;

use super::connection::{Connection, GlobalArgs};
use super::listing::{Paging, list_pages};
use super::output::{self, Row};
use super::resolve;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead projects create shop
  bulkhead projects list --output json | jq -r '.items[].name'
  bulkhead projects environments create -p shop production")]
pub struct ProjectsArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: ProjectsAction,
}

#[derive(Subcommand)]
pub enum ProjectsAction {
    /// List the projects you are a member of (all of them for administrators).
    #[command(after_help = "Example:\n  bulkhead projects list --all")]
    List(Paging),
    /// Create a project; you become its owner.
    #[command(after_help = "Example:\n  bulkhead projects create shop --description 'The shop'")]
    Create {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Show a project (by name or id).
    #[command(after_help = "Example:\n  bulkhead projects show shop")]
    Show { project: String },
    /// Delete a project and everything in it (owners).
    #[command(after_help = "Example:\n  bulkhead projects delete shop")]
    Delete { project: String },
    /// A project's environments.
    #[command(after_help = "Example:\n  bulkhead projects environments list -p shop")]
    #[command(subcommand)]
    Environments(EnvironmentsAction),
}

#[derive(Subcommand)]
pub enum EnvironmentsAction {
    /// List a project's environments.
    #[command(after_help = "Example:\n  bulkhead projects environments list -p shop")]
    List {
        /// The project (name or id).
        #[arg(short, long)]
        project: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// Create an environment in a project.
    #[command(after_help = "Example:\n  bulkhead projects environments create -p shop production")]
    Create {
        /// The project (name or id).
        #[arg(short, long)]
        project: String,
        name: String,
    },
}

impl Row for types::ProjectView {
    const HEADER: &'static [&'static str] = &["ID", "NAME", "DESCRIPTION", "CREATED"];
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.name.clone(),
            self.description.clone(),
            self.created_at.to_rfc3339(),
        ]
    }
}

impl Row for types::EnvironmentView {
    const HEADER: &'static [&'static str] = &["ID", "NAME", "CREATED"];
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.name.clone(),
            self.created_at.to_rfc3339(),
        ]
    }
}

pub async fn projects(args: ProjectsArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    match args.action {
        ProjectsAction::List(paging) => {
            list_pages!(connection, paging.all, |c| c.project_list()).print(format);
        }
        ProjectsAction::Create { name, description } => {
            let project = connection
                .call(async |c| {
                    c.project_create()
                        .body_map(|b| b.name(name.clone()).description(description.clone()))
                        .send()
                        .await
                })
                .await?;
            output::one(format, &project);
        }
        ProjectsAction::Show { project } => {
            let id = resolve::project_id(&connection, &project).await?;
            let project = connection
                .call(async |c| c.project_view().project_id(id).send().await)
                .await?;
            output::one(format, &project);
        }
        ProjectsAction::Delete { project } => {
            let id = resolve::project_id(&connection, &project).await?;
            connection
                .call(async |c| c.project_delete().project_id(id).send().await)
                .await?;
            output::done(format!("Deleted project {project}."));
        }
        ProjectsAction::Environments(action) => environments(&connection, action).await?,
    }
    Ok(())
}

async fn environments(connection: &Connection, action: EnvironmentsAction) -> anyhow::Result<()> {
    let format = connection.args.output;
    match action {
        EnvironmentsAction::List { project, paging } => {
            let project = resolve::project_id(connection, &project).await?;
            list_pages!(connection, paging.all, |c| c
                .environment_list()
                .project_id(project))
            .print(format);
        }
        EnvironmentsAction::Create { project, name } => {
            let project = resolve::project_id(connection, &project).await?;
            let environment = connection
                .call(async |c| {
                    c.environment_create()
                        .project_id(project)
                        .body_map(|b| b.name(name.clone()))
                        .send()
                        .await
                })
                .await?;
            output::one(format, &environment);
        }
    }
    Ok(())
}
