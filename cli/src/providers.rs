//! `bulkhead providers`: each provider's state and breaker health (and, for administrators,
//! why), and the operators' levers: drain, undrain, enable, disable, evacuate, probe, and the
//! plugin's versions (upload, activate, roll back). One operation of the generated client each.

use std::path::PathBuf;

use bulkhead_client::types;
use clap::Subcommand;

use super::connection::{Connection, GlobalArgs};
use super::exit::{Exit, fail};
use super::listing::{Paging, list_pages};
use super::output::{self, Row, optional};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  bulkhead providers list
  bulkhead providers drain gcp
  bulkhead providers evacuate gcp
  bulkhead providers plugin upload gcp ./bulkhead_plugin_gcp.wasm
  bulkhead providers plugin activate gcp 0.2.0")]
pub struct ProvidersArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: ProvidersAction,
}

#[derive(Subcommand)]
pub enum ProvidersAction {
    /// Every provider with its state and breaker health (the reason for administrators).
    #[command(after_help = "Example:\n  bulkhead providers list")]
    List(Paging),
    /// One provider, with its settings for administrators.
    #[command(after_help = "Example:\n  bulkhead providers show aws")]
    Show { name: String },
    /// Place no new instances on a provider (its running instances stay).
    #[command(after_help = "Example:\n  bulkhead providers drain gcp")]
    Drain { name: String },
    /// Let a drained provider take new instances again.
    #[command(after_help = "Example:\n  bulkhead providers undrain gcp")]
    Undrain { name: String },
    /// Enable a disabled provider.
    #[command(after_help = "Example:\n  bulkhead providers enable gcp")]
    Enable { name: String },
    /// Disable a provider: no calls go to its plugin.
    #[command(after_help = "Example:\n  bulkhead providers disable gcp")]
    Disable { name: String },
    /// Move every instance off a provider, make-before-break.
    #[command(after_help = "Example:\n  bulkhead providers evacuate gcp")]
    Evacuate { name: String },
    /// A provider's latest evacuation: how far it got, or cancel it.
    #[command(after_help = "Example:\n  bulkhead providers evacuation show gcp")]
    #[command(subcommand)]
    Evacuation(EvacuationAction),
    /// Call the provider's plugin's health check now.
    #[command(after_help = "Example:\n  bulkhead providers probe aws")]
    Probe { name: String },
    /// A provider's health changes and why, oldest first (administrators).
    #[command(after_help = "Example:\n  bulkhead providers events gcp --all")]
    Events {
        name: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// A provider's plugin: upload a version, activate one, roll back.
    #[command(
        after_help = "Example:\n  bulkhead providers plugin upload gcp ./bulkhead_plugin_gcp.wasm"
    )]
    #[command(subcommand)]
    Plugin(PluginAction),
}

#[derive(Subcommand)]
pub enum EvacuationAction {
    /// How far the latest evacuation got.
    #[command(after_help = "Example:\n  bulkhead providers evacuation show gcp")]
    Show { name: String },
    /// Cancel a running evacuation.
    #[command(after_help = "Example:\n  bulkhead providers evacuation cancel gcp")]
    Cancel { name: String },
}

#[derive(Subcommand)]
pub enum PluginAction {
    /// Upload a plugin binary (a Wasm component) for a provider; it runs once activated.
    #[command(
        after_help = "Example:\n  bulkhead providers plugin upload gcp ./bulkhead_plugin_gcp.wasm"
    )]
    Upload { name: String, file: PathBuf },
    /// Switch a provider to an uploaded version (a version of its plugin, or a digest).
    #[command(after_help = "Example:\n  bulkhead providers plugin activate gcp 0.2.0")]
    Activate { name: String, version: String },
    /// Switch a provider back to the version active before its last switch.
    #[command(after_help = "Example:\n  bulkhead providers plugin rollback gcp")]
    Rollback { name: String },
}

impl Row for types::ProviderView {
    const HEADER: &'static [&'static str] = &["NAME", "STATE", "HEALTH", "PLUGIN", "REASON"];
    fn row(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.state.to_string(),
            optional(self.health.as_ref()),
            optional(
                self.plugin
                    .as_ref()
                    .map(|p| format!("{} {}", p.name, p.version)),
            ),
            optional(self.health_reason.as_ref()),
        ]
    }
}

impl Row for types::ProviderEventView {
    const HEADER: &'static [&'static str] = &["TIME", "KIND", "FROM", "TO", "REASON"];
    fn row(&self) -> Vec<String> {
        vec![
            self.created_at.to_rfc3339(),
            self.kind.to_string(),
            self.from.to_string(),
            self.to.to_string(),
            self.reason.clone(),
        ]
    }
}

pub async fn providers(args: ProvidersArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    match args.action {
        ProvidersAction::List(paging) => {
            list_pages!(connection, paging.all, |c| c.provider_list()).print(format);
        }
        ProvidersAction::Show { name } => {
            let view = connection
                .call(async |c| c.provider_view().name(name.clone()).send().await)
                .await?;
            output::one(format, &view);
        }
        ProvidersAction::Drain { name } => {
            provider_update(&connection, &name, |b| b.drained(Some(true))).await?
        }
        ProvidersAction::Undrain { name } => {
            provider_update(&connection, &name, |b| b.drained(Some(false))).await?
        }
        ProvidersAction::Enable { name } => {
            provider_update(&connection, &name, |b| b.enabled(Some(true))).await?
        }
        ProvidersAction::Disable { name } => {
            provider_update(&connection, &name, |b| b.enabled(Some(false))).await?
        }
        ProvidersAction::Evacuate { name } => {
            let evacuation = connection
                .call(async |c| c.evacuation_start().name(name.clone()).send().await)
                .await?;
            output::one(format, &evacuation);
        }
        ProvidersAction::Evacuation(EvacuationAction::Show { name }) => {
            let evacuation = connection
                .call(async |c| c.evacuation_view().name(name.clone()).send().await)
                .await?;
            output::one(format, &evacuation);
        }
        ProvidersAction::Evacuation(EvacuationAction::Cancel { name }) => {
            let evacuation = connection
                .call(async |c| c.evacuation_cancel().name(name.clone()).send().await)
                .await?;
            output::one(format, &evacuation);
        }
        ProvidersAction::Probe { name } => {
            let probe = connection
                .call(async |c| c.provider_probe().name(name.clone()).send().await)
                .await?;
            output::one(format, &probe);
        }
        ProvidersAction::Events { name, paging } => {
            list_pages!(connection, paging.all, |c| c
                .provider_event_list()
                .name(name.clone()))
            .print(format);
        }
        ProvidersAction::Plugin(action) => plugin(&connection, action).await?,
    }
    Ok(())
}

/// Changes one setting of a provider and prints it as it is now.
async fn provider_update(
    connection: &Connection,
    name: &str,
    change: impl Fn(types::builder::ProviderUpdate) -> types::builder::ProviderUpdate,
) -> anyhow::Result<()> {
    let view = connection
        .call(async |c| {
            c.provider_update()
                .name(name)
                .body_map(&change)
                .send()
                .await
        })
        .await?;
    output::one(connection.args.output, &view);
    Ok(())
}

async fn plugin(connection: &Connection, action: PluginAction) -> anyhow::Result<()> {
    let format = connection.args.output;
    match action {
        PluginAction::Upload { name, file } => {
            let bytes =
                std::fs::read(&file).map_err(|err| anyhow::anyhow!("{}: {err}", file.display()))?;
            let binary = connection
                .call(async |c| c.plugin_binary_upload().body(bytes.clone()).send().await)
                .await?;
            output::one(format, &binary);
            output::done(format!(
                "Uploaded {} {}; switch {name} to it with `bulkhead providers plugin activate {name} {}`.",
                binary.name, binary.version, binary.version
            ));
        }
        PluginAction::Activate { name, version } => {
            let digest = plugin_digest(connection, &name, &version).await?;
            let view = connection
                .call(async |c| {
                    c.provider_activate()
                        .name(name.clone())
                        .body_map(|b| b.digest(digest.clone()))
                        .send()
                        .await
                })
                .await?;
            output::one(format, &view);
        }
        PluginAction::Rollback { name } => {
            let view = connection
                .call(async |c| c.provider_rollback().name(name.clone()).send().await)
                .await?;
            output::one(format, &view);
        }
    }
    Ok(())
}

/// The digest of the stored binary `version` names: a digest itself, or the version of the
/// provider's plugin (of the same plugin name, when the provider runs one).
async fn plugin_digest(
    connection: &Connection,
    provider: &str,
    version: &str,
) -> anyhow::Result<String> {
    let binaries = list_pages!(connection, true, |c| c.plugin_binary_list()).items;
    if let Some(binary) = binaries.iter().find(|b| b.digest == version) {
        return Ok(binary.digest.clone());
    }
    let current = connection
        .call(async |c| c.provider_view().name(provider).send().await)
        .await?
        .plugin
        .map(|plugin| plugin.name);
    let matching: Vec<_> = binaries
        .iter()
        .filter(|b| b.version == version && current.as_ref().is_none_or(|name| &b.name == name))
        .collect();
    match matching.as_slice() {
        [binary] => Ok(binary.digest.clone()),
        [] => fail(
            Exit::NotFound,
            format!("no uploaded plugin version `{version}` for {provider}: upload it first"),
        ),
        several => fail(
            Exit::InvalidInput,
            format!(
                "{} uploaded plugins have version `{version}`: give the digest of one ({})",
                several.len(),
                several
                    .iter()
                    .map(|b| b.digest.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}
