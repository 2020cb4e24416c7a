//! `bulkhead routes`: the routing table the edges serve (`table`), its changes by revision
//! (`changes`), the edges with the revision each serves and how far behind it is (`edges`),
//! and the certificates each edge serves HTTPS with (`certificates`). Read-only.

use bulkhead_client::types;
use clap::Subcommand;
use serde_json::Value;

use super::connection::{Connection, GlobalArgs};
use super::listing::{Paging, list_pages};
use super::output::{self, OutputFormat, Row, cell, optional};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead routes table
  bulkhead routes changes --since 40
  bulkhead routes edges
  bulkhead routes certificates")]
pub struct RoutesArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: RoutesAction,
}

#[derive(Subcommand)]
pub enum RoutesAction {
    /// The routing table: each domain and the instances it routes to.
    #[command(after_help = "Example:\n  bulkhead routes table --output json | jq .table.revision")]
    Table,
    /// The changes of the table after a revision, oldest first.
    #[command(after_help = "Example:\n  bulkhead routes changes --since 40")]
    Changes {
        /// Changes after this revision.
        #[arg(long, default_value_t = 0)]
        since: i64,
    },
    /// The edges that reported, with the revision each serves and its lag.
    #[command(after_help = "Example:\n  bulkhead routes edges
  bulkhead routes certificates")]
    Edges(Paging),
    /// The certificates each edge serves HTTPS with: issuer, expiry and last error, failing
    /// ones first.
    #[command(
        after_help = "Example:\n  bulkhead routes certificates --output json | jq '.items[] | select(.last_error)'"
    )]
    Certificates(Paging),
}

impl Row for types::Route {
    const HEADER: &'static [&'static str] = &["DOMAIN", "SERVICE", "UPSTREAMS"];
    fn row(&self) -> Vec<String> {
        let upstreams = self
            .upstreams
            .iter()
            .map(|u| {
                format!(
                    "{} ({}/{}, weight {})",
                    u.address, u.provider, u.region, u.weight
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        vec![self.domain.clone(), self.service_id.to_string(), upstreams]
    }
}

impl Row for types::EdgeView {
    const HEADER: &'static [&'static str] = &[
        "EDGE",
        "REVISION",
        "LAG",
        "VERSION",
        "REPORTED",
        "SNAPSHOT AGE (s)",
        "CERTIFICATES",
    ];
    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.revision.to_string(),
            self.lag.to_string(),
            self.agent_version.clone(),
            self.reported_at.to_rfc3339(),
            optional(self.snapshot_age_seconds),
            certificates_summary(self.certificates.as_ref()),
        ]
    }
}

/// An edge's certificates in a few words.
fn certificates_summary(certificates: Option<&types::EdgeCertificates>) -> String {
    let Some(c) = certificates else {
        return "plain HTTP".to_owned();
    };
    let mut summary = format!("{} of {} issued", c.issued, c.domains);
    if c.failing > 0 {
        summary.push_str(&format!(", {} failing", c.failing));
    }
    if c.expiring_soon > 0 {
        summary.push_str(&format!(", {} expiring within 14 days", c.expiring_soon));
    }
    summary
}

/// One certificate of one edge.
#[derive(serde::Serialize)]
struct CertificateRow {
    edge: String,
    #[serde(flatten)]
    certificate: types::EdgeCertificate,
}

impl Row for CertificateRow {
    const HEADER: &'static [&'static str] = &["EDGE", "DOMAIN", "ISSUER", "EXPIRES", "LAST ERROR"];
    fn row(&self) -> Vec<String> {
        let c = &self.certificate;
        vec![
            self.edge.clone(),
            c.hostname.to_string(),
            c.issuer
                .as_ref()
                .map_or_else(|| "not yet issued".to_owned(), |issuer| issuer.to_string()),
            c.not_after
                .map_or_else(|| "-".to_owned(), |at| at.to_rfc3339()),
            c.last_error
                .as_ref()
                .map_or_else(|| "-".to_owned(), |error| error.to_string()),
        ]
    }
}

/// One change of one revision.
struct ChangeRow {
    revision: i64,
    change: Value,
}

impl Row for ChangeRow {
    const HEADER: &'static [&'static str] = &["REVISION", "OP", "DOMAIN", "UPSTREAMS"];
    fn row(&self) -> Vec<String> {
        let domain = match &self.change["route"] {
            Value::Null => &self.change["domain"],
            route => &route["domain"],
        };
        let upstreams = self.change["route"]["upstreams"]
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|u| cell(&u["address"]))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        vec![
            self.revision.to_string(),
            cell(&self.change["op"]),
            cell(domain),
            upstreams,
        ]
    }
}

pub async fn routes(args: RoutesArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    match args.action {
        RoutesAction::Table => {
            let snapshot = connection
                .call(async |c| c.routing_table_view().send().await)
                .await?;
            output::list(format, &snapshot, &snapshot.table.routes);
            if format == OutputFormat::Table {
                output::done(format!(
                    "Revision {}, generated at {}, signed by key {}.",
                    snapshot.table.revision, snapshot.table.generated_at, snapshot.key_id
                ));
            }
        }
        RoutesAction::Changes { since } => {
            let changes = connection
                .call(async |c| c.routing_table_changes().since(since).send().await)
                .await?;
            let rows: Vec<ChangeRow> = changes
                .revisions
                .iter()
                .flat_map(|revision| {
                    revision.changes.iter().map(|change| ChangeRow {
                        revision: revision.revision,
                        change: serde_json::to_value(change).expect("a change serializes"),
                    })
                })
                .collect();
            output::list(format, &changes, &rows);
            if format == OutputFormat::Table && changes.more {
                output::done(format!(
                    "More changes follow: `bulkhead routes changes --since {}`.",
                    changes.revisions.last().map_or(since, |r| r.revision)
                ));
            }
        }
        RoutesAction::Edges(paging) => {
            list_pages!(connection, paging.all, |c| c.edge_list()).print(format);
        }
        RoutesAction::Certificates(paging) => {
            let edges = list_pages!(connection, paging.all, |c| c.edge_list());
            let edge_count = edges.items.len();
            let items: Vec<CertificateRow> = edges
                .items
                .into_iter()
                .flat_map(|edge| {
                    let id = edge.id;
                    edge.certificates
                        .map(|c| c.items)
                        .unwrap_or_default()
                        .into_iter()
                        .map(move |certificate| CertificateRow {
                            edge: id.clone(),
                            certificate,
                        })
                })
                .collect();
            let partial = edges.next_cursor.is_some();
            let listed = crate::listing::Listed {
                items,
                next_cursor: edges.next_cursor,
            };
            output::list(format, &listed, &listed.items);
            if partial {
                output::done(format!(
                    "The certificates of the first {edge_count} edges are listed; add --all for every edge."
                ));
            }
        }
    }
    Ok(())
}
