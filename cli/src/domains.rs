//! `bulkhead domains`: a project's domains: list them, add one for a service (the answer says
//! which DNS record proves control of it), verify it once the record is published, and remove
//! it. A domain is named by its hostname.

use bulkhead_client::types;
use clap::Subcommand;
use uuid::Uuid;

use super::connection::{Connection, GlobalArgs};
use super::exit::{Exit, fail};
use super::listing::{Listed, Paging, list_pages};
use super::output::{self, Row, optional};
use super::resolve;

#[derive(clap::Args)]
#[command(after_help = "Example:
  bulkhead domains add -p shop -s web shop.example.com   # prints the TXT record to publish
  bulkhead domains verify -p shop shop.example.com        # once it is published: it routes")]
pub struct DomainsArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: DomainsAction,
}

#[derive(Subcommand)]
pub enum DomainsAction {
    /// List a project's domains, their services and whether they are verified.
    #[command(after_help = "Example:\n  bulkhead domains list -p shop")]
    List {
        /// The project (name or id).
        #[arg(short, long)]
        project: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// Add a hostname for a service; it routes once verified.
    #[command(after_help = "Example:\n  bulkhead domains add -p shop -s web shop.example.com")]
    Add {
        /// The project (name or id).
        #[arg(short, long)]
        project: String,
        /// The service it reaches (name or id).
        #[arg(short, long)]
        service: String,
        hostname: String,
    },
    /// Check the domain's DNS challenge now; verified, it joins the routing table.
    #[command(after_help = "Example:\n  bulkhead domains verify -p shop shop.example.com")]
    Verify {
        /// The project (name or id).
        #[arg(short, long)]
        project: String,
        hostname: String,
    },
    /// Remove a domain: it leaves the routing table.
    #[command(after_help = "Example:\n  bulkhead domains remove -p shop shop.example.com")]
    Remove {
        /// The project (name or id).
        #[arg(short, long)]
        project: String,
        hostname: String,
    },
}

impl Row for types::DomainView {
    const HEADER: &'static [&'static str] = &["HOSTNAME", "SERVICE", "STATUS", "VERIFIED", "ID"];
    fn row(&self) -> Vec<String> {
        vec![
            self.hostname.clone(),
            self.service_id.to_string(),
            self.status.to_string(),
            optional(self.verified_at.map(|at| at.to_rfc3339())),
            self.id.to_string(),
        ]
    }
}

pub async fn domains(args: DomainsArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    match args.action {
        DomainsAction::List { project, paging } => {
            let project = resolve::project_id(&connection, &project).await?;
            domains_listed(&connection, project, paging.all)
                .await?
                .print(format);
        }
        DomainsAction::Add {
            project,
            service,
            hostname,
        } => {
            let (project_id, service) =
                resolve::project_and_service(&connection, &project, &service).await?;
            let domain = connection
                .call(async |c| {
                    c.domain_create()
                        .project_id(project_id)
                        .body_map(|b| b.hostname(hostname.clone()).service_id(service))
                        .send()
                        .await
                })
                .await?;
            if let Some(challenge) = &domain.challenge {
                output::done(format!(
                    "Publish the {} record {} with the value {}, then: bulkhead domains verify -p {} {}",
                    challenge.record_type,
                    challenge.name,
                    challenge.value,
                    project,
                    domain.hostname
                ));
            }
            output::one(format, &domain);
        }
        DomainsAction::Verify { project, hostname } => {
            let project = resolve::project_id(&connection, &project).await?;
            let id = domain_id(&connection, project, &hostname).await?;
            let domain = connection
                .call(async |c| {
                    c.domain_verify()
                        .project_id(project)
                        .domain_id(id)
                        .send()
                        .await
                })
                .await?;
            output::one(format, &domain);
        }
        DomainsAction::Remove { project, hostname } => {
            let project = resolve::project_id(&connection, &project).await?;
            let id = domain_id(&connection, project, &hostname).await?;
            connection
                .call(async |c| {
                    c.domain_delete()
                        .project_id(project)
                        .domain_id(id)
                        .send()
                        .await
                })
                .await?;
            output::done(format!("Removed the domain {hostname}."));
        }
    }
    Ok(())
}

async fn domains_listed(
    connection: &Connection,
    project: Uuid,
    all: bool,
) -> anyhow::Result<Listed<types::DomainView>> {
    Ok(list_pages!(connection, all, |c| c
        .domain_list()
        .project_id(project)))
}

/// The id of the project's domain `hostname` (as the server stores it: lowercase, no final dot).
async fn domain_id(connection: &Connection, project: Uuid, hostname: &str) -> anyhow::Result<Uuid> {
    let wanted = hostname.trim_end_matches('.').to_lowercase();
    let domains = domains_listed(connection, project, true).await?;
    match domains
        .items
        .iter()
        .find(|domain| domain.hostname == wanted)
    {
        Some(domain) => Ok(domain.id),
        None => fail(
            Exit::NotFound,
            format!("the project has no domain {hostname}"),
        ),
    }
}
