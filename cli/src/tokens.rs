//! `bulkhead tokens`: list, create and revoke your API tokens. A created token's secret is
//! printed once, on stdout alone (everything else goes to stderr), so that it can be piped
//! into a secret store without being shown elsewhere.

use bulkhead_client::types;
use clap::Subcommand;
use uuid::Uuid;

use super::connection::{Connection, GlobalArgs};
use super::listing::{Paging, list_pages};
use super::output::{self, OutputFormat, Row, optional};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead tokens create --name ci --scope deploy > ci-token
  bulkhead tokens list
  bulkhead tokens revoke 0192f3c4-...")]
pub struct TokensArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: TokensAction,
}

#[derive(Subcommand)]
pub enum TokensAction {
    /// Your API tokens (never their secrets).
    #[command(after_help = "Example:\n  bulkhead tokens list")]
    List(Paging),
    /// Create an API token; its secret is printed once, to stdout.
    #[command(
        after_help = "Example:\n  bulkhead tokens create --name ci --scope deploy --scope read > ci-token"
    )]
    Create {
        #[arg(long)]
        name: String,
        /// What it may do (repeatable): admin, write, read, deploy, routing:read.
        #[arg(long = "scope", required = true, value_parser = scope_parse)]
        scopes: Vec<types::Scope>,
    },
    /// Revoke one of your API tokens.
    #[command(after_help = "Example:\n  bulkhead tokens revoke 0192f3c4-...")]
    Revoke { id: Uuid },
}

fn scope_parse(text: &str) -> Result<types::Scope, String> {
    text.parse::<types::Scope>()
        .map_err(|_| "one of admin, write, read, deploy, routing:read".to_owned())
}

impl Row for types::TokenView {
    const HEADER: &'static [&'static str] = &[
        "ID",
        "NAME",
        "PREFIX",
        "SCOPES",
        "CREATED",
        "LAST USED",
        "REVOKED",
    ];
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.name.clone(),
            self.prefix.clone(),
            self.scopes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            self.created_at.to_rfc3339(),
            optional(self.last_used_at.map(|at| at.to_rfc3339())),
            optional(self.revoked_at.map(|at| at.to_rfc3339())),
        ]
    }
}

pub async fn tokens(args: TokensArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    match args.action {
        TokensAction::List(paging) => {
            list_pages!(connection, paging.all, |c| c.token_list()).print(format);
        }
        TokensAction::Create { name, scopes } => {
            let created = connection
                .call(async |c| {
                    c.token_create()
                        .body_map(|b| b.name(name.clone()).scopes(scopes.clone()))
                        .send()
                        .await
                })
                .await?;
            match format {
                OutputFormat::Json => output::json(&created),
                OutputFormat::Table => {
                    output::done(format!(
                        "Created token {} ({}). Its secret, shown this once:",
                        created.name, created.id
                    ));
                    println!("{}", created.secret);
                }
            }
        }
        TokensAction::Revoke { id } => {
            connection
                .call(async |c| c.token_revoke().token_id(id).send().await)
                .await?;
            output::done(format!("Revoked token {id}."));
        }
    }
    Ok(())
}
