//! `bulkhead limits`: the caps on what you hold (projects, API tokens) or, with `-p`, on what a
//! project holds, each with how much of it is used.

use bulkhead_client::types;

use super::connection::{Connection, GlobalArgs};
use super::output::{self, Row};
use super::resolve;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead limits              # your projects and API tokens
  bulkhead limits -p shop      # the project's environments, services, domains, members, ...")]
pub struct LimitsArgs {
    #[command(flatten)]
    global: GlobalArgs,
    /// A project (name or id): its caps instead of yours.
    #[arg(short, long)]
    project: Option<String>,
}

impl Row for types::LimitView {
    const HEADER: &'static [&'static str] = &["LIMIT", "COUNTS", "USED", "MAX"];
    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.counts.clone(),
            self.used.to_string(),
            self.max.to_string(),
        ]
    }
}

pub async fn limits(args: LimitsArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let view = match &args.project {
        Some(project) => {
            let project = resolve::project_id(&connection, project).await?;
            connection
                .call(async |c| c.project_limits().project_id(project).send().await)
                .await?
        }
        None => {
            connection
                .call(async |c| c.me_limits().send().await)
                .await?
        }
    };
    output::list(args.global.output, &view, &view.limits);
    Ok(())
}
