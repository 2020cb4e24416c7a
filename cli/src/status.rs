//! `bulkhead status`: the control plane's replicas (alive or not, by heartbeat), the replica
//! leading each kind of background work, with its lease's term, and the background tasks of
//! the replica that answered: when each last ran, how it ended and its last error
//! (administrators).

use bulkhead_client::types;

use super::connection::{Connection, GlobalArgs};
use super::output::{self, OutputFormat, Row};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead status
  bulkhead status --output json | jq '.leaders[] | select(.current | not)'
  bulkhead status --output json | jq '.tasks[] | select(.consecutive_failures > 0)'")]
pub struct StatusArgs {
    #[command(flatten)]
    global: GlobalArgs,
}

impl Row for types::ReplicaView {
    const HEADER: &'static [&'static str] =
        &["REPLICA", "ADDRESS", "VERSION", "HEARTBEAT", "ALIVE"];
    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.address.clone(),
            self.version.clone(),
            self.heartbeat_at.to_rfc3339(),
            self.alive.to_string(),
        ]
    }
}

impl Row for types::LeaderView {
    const HEADER: &'static [&'static str] = &["WORK", "LEADER", "TERM", "EXPIRES", "CURRENT"];
    fn row(&self) -> Vec<String> {
        vec![
            self.work.to_string(),
            self.holder.clone(),
            self.term.to_string(),
            self.expires_at.to_rfc3339(),
            self.current.to_string(),
        ]
    }
}

impl Row for types::TaskStatus {
    const HEADER: &'static [&'static str] = &[
        "TASK",
        "STATE",
        "LAST RUN",
        "TOOK (MS)",
        "OUTCOME",
        "FAILURES",
        "LAST ERROR",
    ];
    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.state.to_string(),
            self.last_started_at
                .map(|at| at.to_rfc3339())
                .unwrap_or_default(),
            self.last_duration_ms
                .map(|ms| ms.to_string())
                .unwrap_or_default(),
            self.last_outcome
                .map(|outcome| outcome.to_string())
                .unwrap_or_default(),
            format!("{} ({} in a row)", self.failures, self.consecutive_failures),
            self.last_error.clone().unwrap_or_default(),
        ]
    }
}

pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let status = connection
        .call(async |c| c.cluster_status().send().await)
        .await?;
    match args.global.output {
        OutputFormat::Json => output::json(&status),
        OutputFormat::Table => {
            let replicas = status.replicas.iter().map(Row::row);
            println!("{}", output::table(types::ReplicaView::HEADER, replicas));
            println!();
            let leaders = status.leaders.iter().map(Row::row);
            println!("{}", output::table(types::LeaderView::HEADER, leaders));
            println!();
            let tasks = status.tasks.iter().map(Row::row);
            println!("{}", output::table(types::TaskStatus::HEADER, tasks));
            if let Some(database) = &status.database {
                println!();
                println!("{}", database_line(database));
            }
        }
    }
    Ok(())
}

/// Which database server the replica that answered follows, in one line.
fn database_line(database: &types::DatabasePrimary) -> String {
    let state = match (&database.last_error, database.reachable) {
        (_, true) => "the primary".to_owned(),
        (Some(error), false) => format!("not answering as the primary: {error}"),
        (None, false) => "not answering as the primary".to_owned(),
    };
    format!(
        "DATABASE {} ({state}) since {}, {} switch(es); servers: {}",
        database.server,
        database.since.to_rfc3339(),
        database.switches,
        database.servers.join(", ")
    )
}
