//! `bulkhead plugin`: tools for plugin authors — scaffold a plugin project (`new`), look at a
//! component the way the server would (`inspect`), and run one call of it in the server's
//! sandbox (`call`), reaching what the server would let it reach.
//!
//! Everything here runs locally, with no server: `call` builds the plugin's settings from its
//! flags exactly as the server builds them from a provider's record (configuration, secrets,
//! allowlist plus the endpoints in the configuration).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use serde_json::json;

use bulkhead::app::shared::sizes::ServiceSizes;
use bulkhead::plugins::{
    Allowlist, InstanceSize, InstanceSpec, PluginEnv, PluginError, PluginHost, PluginLimits,
    endpoint_patterns,
};

#[derive(Subcommand)]
pub enum PluginAction {
    /// Create a plugin project that builds as it is: Cargo.toml (the SDK, serde, the release
    /// profile), a provider skeleton with a unit test, a README.
    #[command(after_help = "Example:\n  bulkhead plugin new my-cloud --path ./my-cloud")]
    New {
        /// The plugin's name: lowercase letters, digits and `-` (its `info().name` too).
        name: String,
        /// Where to create it (default: a new directory NAME here).
        #[arg(long)]
        path: Option<PathBuf>,
        /// The SDK to depend on: a path to Bulkhead's `sdk/` (default: the SDK of the source
        /// tree this binary was built from, if it is still there; else the published crate).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Show a plugin's contract version, declared configuration, imports, exports, size and
    /// digest, and whether the server would accept it.
    #[command(
        after_help = "Example:\n  bulkhead plugin inspect target/wasm32-wasip2/release/my_cloud.wasm"
    )]
    Inspect { file: PathBuf },
    /// Run one call of a plugin locally, in the same sandbox as the server.
    #[command(
        after_help = "Example:\n  bulkhead plugin call my_cloud.wasm provision --config endpoint=http://127.0.0.1:9000 --secret token=s3cret --key web-1"
    )]
    Call {
        file: PathBuf,
        /// info, health, provision, deprovision, describe or list.
        function: String,
        /// Configuration of the plugin, as KEY=VALUE (repeatable). The plugin may reach the
        /// `host:port` of every http(s) URL given here, as on the server.
        #[arg(long = "config", value_parser = key_value)]
        config: Vec<(String, String)>,
        /// Secrets of the plugin, as KEY=VALUE (repeatable).
        #[arg(long = "secret", value_parser = key_value)]
        secrets: Vec<(String, String)>,
        /// Another `host:port` the plugin may send HTTP requests to (repeatable; `*.domain` and
        /// port `*` allowed), besides its configured endpoints.
        #[arg(long = "allow-host")]
        allow_hosts: Vec<String>,
        /// Instance key (provision, deprovision, describe).
        #[arg(long, default_value = "example-1")]
        key: String,
        /// Region (provision).
        #[arg(long, default_value = "local")]
        region: String,
        /// Artifact (provision).
        #[arg(long, default_value = "example/app:1")]
        artifact: String,
        /// Port (provision).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// The workload's size (provision), as CPU_MILLIS:MEMORY_MIB.
        #[arg(long, default_value = "500:512", value_parser = size_parse)]
        size: InstanceSize,
        /// How to print the answer.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Rust's debug notation, for people.
    Text,
    /// One JSON document: the answer, or `{"error": …}` (exit code 1).
    Json,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("`{text}` is not KEY=VALUE"))
}

pub async fn plugin_command(action: PluginAction) -> anyhow::Result<()> {
    match action {
        PluginAction::New { name, path, sdk } => plugin_new(&name, path, sdk),
        PluginAction::Inspect { file } => plugin_inspect(&file).await,
        PluginAction::Call {
            file,
            function,
            config,
            secrets,
            allow_hosts,
            key,
            region,
            artifact,
            port,
            size,
            output,
        } => {
            let env = call_env(config, secrets, &allow_hosts)?;
            let spec = InstanceSpec {
                instance_key: key.clone(),
                region,
                artifact,
                port,
                env: vec![],
                labels: vec![],
                health_check: None,
                source: None,
                size,
            };
            plugin_call(&file, &function, &env, spec, output).await
        }
    }
}

/// The settings a call runs with, as the server would build them for a provider.
fn call_env(
    config: Vec<(String, String)>,
    secrets: Vec<(String, String)>,
    allow_hosts: &[String],
) -> anyhow::Result<Arc<PluginEnv>> {
    let config = config.into_iter().collect();
    // The endpoints of `--config` count as listed here, loopback ones included: whoever runs
    // the command typed them, as an operator lists a provider's allowlist. The server takes a
    // provider's configured endpoints as names only (`Allowlist::with_endpoints`).
    let mut patterns = allow_hosts.to_vec();
    patterns.extend(endpoint_patterns(&config));
    let allowlist = Allowlist::parse(&patterns).map_err(|err| anyhow::anyhow!(err))?;
    Ok(Arc::new(PluginEnv {
        provider: "cli".into(),
        config,
        secrets: secrets.into_iter().collect(),
        allowlist: Arc::new(allowlist),
        cache: Default::default(),
        connections: Default::default(),
    }))
}

fn read(file: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| file.display().to_string())
}

async fn plugin_inspect(file: &Path) -> anyhow::Result<()> {
    let host = PluginHost::new(None)?;
    let bytes = read(file)?;
    let inspection = host.plugin_inspect(&bytes);
    println!("file:     {}", file.display());
    println!("size:     {} bytes", inspection.size);
    println!("sha256:   {}", inspection.digest);
    println!("imports:  {}", inspection.imports.join(", "));
    println!("exports:  {}", inspection.exports.join(", "));
    let version = match inspection.verdict {
        Ok(version) => version,
        Err(rejection) => {
            println!("verdict:  rejected: {rejection}");
            std::process::exit(1);
        }
    };
    println!("contract: bulkhead:provider@{version}");
    let plugin = host.plugin_load(&bytes, PluginLimits::default())?;
    let env = Arc::new(PluginEnv {
        provider: "inspect".into(),
        ..Default::default()
    });
    match host.plugin_info(&plugin, &env).await {
        Ok(info) => {
            println!("plugin:   {} {}", info.name, info.version);
            if info.config.is_empty() {
                println!("config:   (none declared)");
            }
            for key in &info.config {
                let kind = match (key.secret, key.required) {
                    (true, true) => "secret, required",
                    (true, false) => "secret, optional",
                    (false, true) => "required",
                    (false, false) => "optional",
                };
                println!("config:   {} ({kind}): {}", key.name, key.description);
            }
            println!("verdict:  accepted");
        }
        Err(err) => {
            println!("verdict:  rejected: its `info` call failed: {err}");
            std::process::exit(1);
        }
    }
    Ok(())
}

async fn plugin_call(
    file: &Path,
    function: &str,
    env: &Arc<PluginEnv>,
    spec: InstanceSpec,
    output: Output,
) -> anyhow::Result<()> {
    let host = PluginHost::new(None)?;
    let plugin = host.plugin_load(&read(file)?, PluginLimits::default())?;
    let key = spec.instance_key.clone();
    // Each answer as (debug text, JSON).
    fn both<T: std::fmt::Debug + serde::Serialize>(value: T) -> (String, serde_json::Value) {
        (format!("{value:#?}"), json!(value))
    }
    let answer = match function {
        "info" => host.plugin_info(&plugin, env).await.map(both),
        "health" => host.plugin_health(&plugin, env).await.map(both),
        "provision" => host.plugin_provision(&plugin, env, spec).await.map(both),
        "deprovision" => host
            .plugin_deprovision(&plugin, env, key)
            .await
            .map(|()| ("ok".to_owned(), json!({ "ok": true }))),
        "describe" => host.plugin_describe(&plugin, env, key).await.map(both),
        "list" => host.plugin_list(&plugin, env).await.map(both),
        other => anyhow::bail!(
            "unknown function `{other}`: info, health, provision, deprovision, describe, list"
        ),
    };
    match (answer, output) {
        (Ok((text, _)), Output::Text) => println!("{text}"),
        (Ok((_, value)), Output::Json) => println!("{}", serde_json::to_string_pretty(&value)?),
        (Err(err), Output::Text) => {
            eprintln!("error: {err}");
            std::process::exit(1);
        }
        (Err(err), Output::Json) => {
            let error = match &err {
                PluginError::Provider(error) => json!({ "kind": "provider_error", "error": error }),
                other => json!({ "kind": failure_kind(other), "message": other.to_string() }),
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({ "error": error }))?
            );
            std::process::exit(1);
        }
    }
    Ok(())
}

fn failure_kind(err: &PluginError) -> &'static str {
    match err {
        PluginError::Provider(_) => "provider_error",
        PluginError::Timeout(_) => "timeout",
        PluginError::MemoryExceeded(_) => "memory_exceeded",
        PluginError::Trap(_) => "trap",
        PluginError::Host(_) => "host_error",
    }
}

/// The files of a new plugin project, from the templates in `plugin_template/`.
fn plugin_new(name: &str, path: Option<PathBuf>, sdk: Option<PathBuf>) -> anyhow::Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        anyhow::bail!(
            "`{name}` is not a plugin name: lowercase letters, digits and `-`, starting with a letter"
        );
    }
    let dir = path.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        anyhow::bail!("{} exists and is not empty", dir.display());
    }
    let sdk_line = match sdk.or_else(source_tree_sdk) {
        Some(sdk) => {
            let sdk = sdk
                .canonicalize()
                .with_context(|| format!("the SDK at {}", sdk.display()))?;
            format!(
                "bulkhead-sdk = {{ path = {:?} }}",
                sdk.display().to_string()
            )
        }
        None => "bulkhead-sdk = \"0.3\"".to_owned(),
    };
    for (file, template) in scaffold_files(name, &sdk_line) {
        let target = dir.join(file);
        std::fs::create_dir_all(target.parent().expect("a file in the project"))?;
        std::fs::write(&target, template).with_context(|| target.display().to_string())?;
    }
    let crate_name = name.replace('-', "_");
    println!(
        "Created the plugin `{name}` in {dir}. Next:\n  cd {dir}\n  cargo test\n  cargo build --release --target wasm32-wasip2\n  bulkhead plugin inspect target/wasm32-wasip2/release/{crate_name}.wasm",
        dir = dir.display()
    );
    Ok(())
}

/// The SDK next to this binary's source tree, when it was built from one that is still there.
fn source_tree_sdk() -> Option<PathBuf> {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk");
    sdk.join("Cargo.toml").exists().then_some(sdk)
}

/// The project's files for plugin `name`: (relative path, contents).
pub fn scaffold_files(name: &str, sdk_line: &str) -> Vec<(&'static str, String)> {
    let type_name: String = name
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    let fill = |template: &str| {
        template
            .replace("__NAME__", name)
            .replace("__TYPE__", &type_name)
            .replace("__CRATE__", &name.replace('-', "_"))
            .replace("__SDK__", sdk_line)
    };
    vec![
        (
            "Cargo.toml",
            fill(include_str!("plugin_template/Cargo.toml.txt")),
        ),
        (
            "src/lib.rs",
            fill(include_str!("plugin_template/lib.rs.txt")),
        ),
        (
            "README.md",
            fill(include_str!("plugin_template/README.md.txt")),
        ),
        (
            ".gitignore",
            fill(include_str!("plugin_template/gitignore.txt")),
        ),
    ]
}

/// `CPU_MILLIS:MEMORY_MIB`, within the contract's bounds.
fn size_parse(text: &str) -> Result<InstanceSize, String> {
    let size = ServiceSizes::parse_size(text)?;
    bulkhead_common::size::size_check_absolute("--size", size.cpu_millis, size.memory_mib)?;
    Ok(size.to_contract())
}
