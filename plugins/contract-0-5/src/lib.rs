//! A provider plugin of contract `bulkhead:provider@0.5.0`, generated from the WIT as published
//! (`sdk/wit/0.5.0/`) with plain wit-bindgen, as a plugin built before 0.6.0 was: the host's
//! tests load it beside 0.6.0 plugins and call every function.
//!
//! It uses what 0.5.0 added: `logs` (two numbered lines after the cursor, one per stream). It
//! claims the `git-source` capability, which 0.5.0 cannot honour: the host must still refuse to
//! give it a spec with a source. Its "cloud" is its configuration: `regions`
//! (comma-separated, default `v05`) and `address`.

wit_bindgen::generate!({
    path: "../../sdk/wit/0.5.0",
    world: "provider",
    generate_all,
});

use bulkhead::provider::host::config_get;
use bulkhead::provider::types::{
    HealthReport, HealthStatus, Instance, InstanceSpec, InstanceState, LogLine, LogPage,
    LogRequest, LogStream, ProviderError, ProviderInfo, WorkloadHealth,
};
use exports::bulkhead::provider::adapter::Guest;

struct V05;

fn regions() -> Vec<String> {
    config_get("regions")
        .unwrap_or_else(|| "v05".into())
        .split(',')
        .map(|region| region.trim().to_owned())
        .filter(|region| !region.is_empty())
        .collect()
}

fn instance(instance_key: String, region: String) -> Instance {
    Instance {
        provider_id: format!("v05-{instance_key}"),
        instance_key,
        region,
        state: InstanceState::Running,
        address: config_get("address"),
        health: WorkloadHealth::Healthy,
    }
}

impl Guest for V05 {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "v05".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: regions(),
            capabilities: vec!["health-checks".into(), "logs".into(), "git-source".into()],
            config: vec![],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        Ok(HealthReport {
            status: HealthStatus::Healthy,
            message: "contract 0.5.0 plugin".into(),
        })
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        if !regions().contains(&spec.region) {
            return Err(ProviderError::InvalidSpec(format!(
                "unknown region `{}`",
                spec.region
            )));
        }
        Ok(instance(spec.instance_key, spec.region))
    }

    fn deprovision(_instance_key: String) -> Result<(), ProviderError> {
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        Ok(instance(instance_key, regions().remove(0)))
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        Ok(vec![instance("one".into(), regions().remove(0))])
    }

    fn logs(instance_key: String, request: LogRequest) -> Result<LogPage, ProviderError> {
        let after: u64 = request
            .after
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|_| ProviderError::InvalidSpec("not a cursor of this plugin".into()))?
            .unwrap_or(0);
        let line = |n: u64, stream| LogLine {
            time_ms: 1_700_000_000_000 + n,
            stream,
            text: format!("{instance_key} line {n}"),
        };
        Ok(LogPage {
            lines: vec![
                line(after + 1, LogStream::Stdout),
                line(after + 2, LogStream::Stderr),
            ],
            next: (after + 2).to_string(),
            gap: false,
        })
    }
}

export!(V05);
