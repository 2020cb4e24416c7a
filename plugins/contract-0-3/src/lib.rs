//! A provider plugin of contract `bulkhead:provider@0.3.0`, generated from the WIT as published
//! (`sdk/wit/0.3.0/`) with plain wit-bindgen, as a plugin built before 0.4.0 was: the host's
//! tests load it beside 0.4.0 plugins and call every function.
//!
//! It uses what 0.3.0 added: declared configuration, the host's cache (`provision` counts its
//! calls there and reports the count in the instance's provider id) and the `forbidden` error.
//! Its "cloud" is its configuration: `regions` (comma-separated, default `v03`) and `address`.

wit_bindgen::generate!({
    path: "../../sdk/wit/0.3.0",
    world: "provider",
    generate_all,
});

use bulkhead::provider::host::{LogLevel, cache_get, cache_set, config_get, log};
use bulkhead::provider::types::{
    ConfigKey, HealthReport, HealthStatus, Instance, InstanceSpec, InstanceState, ProviderError,
    ProviderInfo,
};
use exports::bulkhead::provider::adapter::Guest;

struct V03;

fn regions() -> Vec<String> {
    config_get("regions")
        .unwrap_or_else(|| "v03".into())
        .split(',')
        .map(|region| region.trim().to_owned())
        .filter(|region| !region.is_empty())
        .collect()
}

fn instance(instance_key: String, region: String, provider_id: String) -> Instance {
    Instance {
        provider_id,
        instance_key,
        region,
        state: InstanceState::Running,
        address: config_get("address"),
    }
}

/// Counts `provision` calls in the host's cache: the count after this call.
fn provisions_count() -> u64 {
    let count = cache_get("provisions")
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
        + 1;
    if let Err(err) = cache_set("provisions", &count.to_le_bytes(), 3600) {
        log(LogLevel::Warn, &format!("cache refused the count: {err}"));
    }
    count
}

impl Guest for V03 {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "v03".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: regions(),
            capabilities: vec![],
            config: vec![ConfigKey {
                name: "address".into(),
                required: false,
                secret: false,
                description: "Where instances answer".into(),
            }],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        Ok(HealthReport {
            status: HealthStatus::Healthy,
            message: "contract 0.3.0 plugin".into(),
        })
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        if !regions().contains(&spec.region) {
            return Err(ProviderError::InvalidSpec(format!(
                "unknown region `{}`",
                spec.region
            )));
        }
        let count = provisions_count();
        log(
            LogLevel::Info,
            &format!("provisioning {} (call {count})", spec.instance_key),
        );
        let id = format!("v03-{}-{count}", spec.instance_key);
        Ok(instance(spec.instance_key, spec.region, id))
    }

    fn deprovision(instance_key: String) -> Result<(), ProviderError> {
        if instance_key == "locked" {
            return Err(ProviderError::Forbidden("v03 refusal".into()));
        }
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        let id = format!("v03-{instance_key}");
        Ok(instance(instance_key, regions().remove(0), id))
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        Ok(vec![instance(
            "one".into(),
            regions().remove(0),
            "v03-one".into(),
        )])
    }
}

export!(V03);
