//! A provider plugin of contract `bulkhead:provider@0.6.0`, generated from the WIT as published
//! (`sdk/wit/0.6.0/`) with plain wit-bindgen, as a plugin built before 0.7.0 was: the host's
//! tests load it beside 0.7.0 plugins and call every function.
//!
//! It uses what 0.6.0 added: a spec's `source` (its instance's `detail` names the commit it
//! would build) and `instance.detail`. It knows nothing of sizes: the host gives it the spec
//! less its size. Its "cloud" is its configuration: `regions` (comma-separated, default `v06`)
//! and `address`.

wit_bindgen::generate!({
    path: "../../sdk/wit/0.6.0",
    world: "provider",
    generate_all,
});

use bulkhead::provider::host::config_get;
use bulkhead::provider::types::{
    HealthReport, HealthStatus, Instance, InstanceSpec, InstanceState, LogLine, LogPage,
    LogRequest, LogStream, ProviderError, ProviderInfo, WorkloadHealth,
};
use exports::bulkhead::provider::adapter::Guest;

struct V06;

fn regions() -> Vec<String> {
    config_get("regions")
        .unwrap_or_else(|| "v06".into())
        .split(',')
        .map(|region| region.trim().to_owned())
        .filter(|region| !region.is_empty())
        .collect()
}

fn instance(instance_key: String, region: String, detail: Option<String>) -> Instance {
    Instance {
        provider_id: format!("v06-{instance_key}"),
        instance_key,
        region,
        state: InstanceState::Running,
        address: config_get("address"),
        health: WorkloadHealth::Healthy,
        detail,
    }
}

impl Guest for V06 {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "v06".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: regions(),
            capabilities: vec!["health-checks".into(), "logs".into(), "git-source".into()],
            config: vec![],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        Ok(HealthReport {
            status: HealthStatus::Healthy,
            message: "contract 0.6.0 plugin".into(),
        })
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        if !regions().contains(&spec.region) {
            return Err(ProviderError::InvalidSpec(format!(
                "unknown region `{}`",
                spec.region
            )));
        }
        let detail = spec
            .source
            .map(|source| format!("built {} of {}", source.commit, source.url));
        Ok(instance(spec.instance_key, spec.region, detail))
    }

    fn deprovision(_instance_key: String) -> Result<(), ProviderError> {
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        Ok(instance(instance_key, regions().remove(0), None))
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        Ok(vec![instance("one".into(), regions().remove(0), None)])
    }

    fn logs(instance_key: String, request: LogRequest) -> Result<LogPage, ProviderError> {
        let after: u64 = request
            .after
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|_| ProviderError::InvalidSpec("not a cursor of this plugin".into()))?
            .unwrap_or(0);
        Ok(LogPage {
            lines: vec![LogLine {
                time_ms: 1_700_000_000_000 + after + 1,
                stream: LogStream::Stdout,
                text: format!("{instance_key} line {}", after + 1),
            }],
            next: (after + 1).to_string(),
            gap: false,
        })
    }
}

export!(V06);
