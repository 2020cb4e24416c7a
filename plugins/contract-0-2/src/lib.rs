//! A provider plugin of contract `bulkhead:provider@0.2.0`, generated from the WIT as published
//! (`sdk/wit/0.2.0/`) with plain wit-bindgen, as a plugin built before 0.3.0 was: the host's
//! tests load it beside 0.3.0 plugins and call every function.
//!
//! Its "cloud" is its configuration: `regions` (comma-separated, default `legacy`) and
//! `address`; `provision` logs through the 0.2.0 host interface.

wit_bindgen::generate!({
    path: "../../sdk/wit/0.2.0",
    world: "provider",
    generate_all,
});

use bulkhead::provider::host::{LogLevel, config_get, log};
use bulkhead::provider::types::{
    HealthReport, HealthStatus, Instance, InstanceSpec, InstanceState, ProviderError, ProviderInfo,
};
use exports::bulkhead::provider::adapter::Guest;

struct Legacy;

fn regions() -> Vec<String> {
    config_get("regions")
        .unwrap_or_else(|| "legacy".into())
        .split(',')
        .map(|region| region.trim().to_owned())
        .filter(|region| !region.is_empty())
        .collect()
}

fn instance(instance_key: String, region: String) -> Instance {
    Instance {
        provider_id: format!("legacy-{instance_key}"),
        instance_key,
        region,
        state: InstanceState::Running,
        address: config_get("address"),
    }
}

impl Guest for Legacy {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "legacy".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: regions(),
            capabilities: vec![],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        Ok(HealthReport {
            status: HealthStatus::Healthy,
            message: "contract 0.2.0 plugin".into(),
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
        Ok(instance(spec.instance_key, spec.region))
    }

    fn deprovision(instance_key: String) -> Result<(), ProviderError> {
        if instance_key == "locked" {
            return Err(ProviderError::Unauthorized("legacy refusal".into()));
        }
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        Ok(instance(instance_key, regions().remove(0)))
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        Ok(vec![instance("one".into(), regions().remove(0))])
    }
}

export!(Legacy);
