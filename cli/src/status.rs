//! `bulkhead status`: the control plane's replicas (alive or not, by heartbeat) and the replica
//! leading each kind of background work, with its lease's term (administrators).

use bulkhead_client::types;

use super::connection::{Connection, GlobalArgs};
use super::output::{self, OutputFormat, Row};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead status
  bulkhead status --output json | jq '.leaders[] | select(.current | not)'")]
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
        }
    }
    Ok(())
}
