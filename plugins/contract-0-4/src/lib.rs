//! A provider plugin of contract `bulkhead:provider@0.4.0`, generated from the WIT as published
//! (`sdk/wit/0.4.0/`) with plain wit-bindgen, as a plugin built before 0.5.0 was: the host's
//! tests load it beside 0.5.0 plugins and call every function.
//!
//! It uses what 0.4.0 added: the health check in the spec (`provision` answers `healthy` when
//! given one, with its path in the provider id) and the instance's `health`. It claims the
//! `logs` capability, which 0.4.0 cannot honour: the host must still treat it as having no logs.
//! Its "cloud" is its configuration: `regions` (comma-separated, default `v04`) and `address`.

wit_bindgen::generate!({
    path: "../../sdk/wit/0.4.0",
    world: "provider",
    generate_all,
});

use bulkhead::provider::host::{LogLevel, config_get, log};
use bulkhead::provider::types::{
    HealthReport, HealthStatus, Instance, InstanceSpec, InstanceState, ProviderError, ProviderInfo,
    WorkloadHealth,
};
use exports::bulkhead::provider::adapter::Guest;

struct V04;

fn regions() -> Vec<String> {
    config_get("regions")
        .unwrap_or_else(|| "v04".into())
        .split(',')
        .map(|region| region.trim().to_owned())
        .filter(|region| !region.is_empty())
        .collect()
}

fn instance(
    instance_key: String,
    region: String,
    provider_id: String,
    health: WorkloadHealth,
) -> Instance {
    Instance {
        provider_id,
        instance_key,
        region,
        state: InstanceState::Running,
        address: config_get("address"),
        health,
    }
}

impl Guest for V04 {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "v04".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: regions(),
            capabilities: vec!["health-checks".into(), "logs".into()],
            config: vec![],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        Ok(HealthReport {
            status: HealthStatus::Healthy,
            message: "contract 0.4.0 plugin".into(),
        })
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        if !regions().contains(&spec.region) {
            return Err(ProviderError::InvalidSpec(format!(
                "unknown region `{}`",
                spec.region
            )));
        }
        log(
            LogLevel::Info,
            &format!("provisioning {}", spec.instance_key),
        );
        let (id, health) = match spec.health_check {
            Some(check) => (
                format!("v04-{}-checked{}", spec.instance_key, check.path),
                WorkloadHealth::Healthy,
            ),
            None => (
                format!("v04-{}", spec.instance_key),
                WorkloadHealth::Unchecked,
            ),
        };
        Ok(instance(spec.instance_key, spec.region, id, health))
    }

    fn deprovision(instance_key: String) -> Result<(), ProviderError> {
        if instance_key == "locked" {
            return Err(ProviderError::Forbidden("v04 refusal".into()));
        }
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        let id = format!("v04-{instance_key}");
        Ok(instance(
            instance_key,
            regions().remove(0),
            id,
            WorkloadHealth::Pending,
        ))
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        Ok(vec![instance(
            "one".into(),
            regions().remove(0),
            "v04-one".into(),
            WorkloadHealth::Unhealthy,
        )])
    }
}

export!(V04);
