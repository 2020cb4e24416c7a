//! A minimal provider plugin. Its "cloud" is a fixed address from its configuration: it
//! provisions nothing, but answers every call of the contract the way a real adapter would, so
//! that the host, the SDK and the CLI can be exercised end to end.
//!
//! Configuration: `regions` (comma-separated, default `local`), `address` (where instances
//! answer, default `127.0.0.1:8080`) and `health_url` (optional: `health` asks it over HTTP).

use bulkhead_sdk::{
    ConfigKey, HealthReport, HealthStatus, Instance, InstanceSpec, InstanceState, Provider,
    ProviderError, ProviderInfo, WorkloadHealth,
};

pub struct Example;

fn regions() -> Vec<String> {
    bulkhead_sdk::config_list("regions", &["local"])
}

fn instance(instance_key: String, region: String) -> Instance {
    Instance {
        provider_id: format!("example-{instance_key}"),
        instance_key,
        region,
        state: InstanceState::Running,
        address: Some(bulkhead_sdk::config("address").unwrap_or_else(|| "127.0.0.1:8080".into())),
        health: WorkloadHealth::Unchecked,
        detail: None,
        machine_type: None,
    }
}

impl Provider for Example {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "example".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            regions: regions(),
            capabilities: vec![],
            config: vec![
                ConfigKey::optional("regions", "Comma-separated regions (default local)"),
                ConfigKey::optional("address", "Where instances answer (default 127.0.0.1:8080)"),
                ConfigKey::optional("health_url", "A URL that `health` asks, if set"),
            ],
        }
    }

    fn health() -> Result<HealthReport, ProviderError> {
        // With `health_url` set, ask it (it must be on the provider's allowlist); otherwise up.
        let Some(url) = bulkhead_sdk::config("health_url") else {
            return Ok(HealthReport {
                status: HealthStatus::Healthy,
                message: "the example provider is always up".into(),
            });
        };
        let response = bulkhead_sdk::http::Request::get(&url)
            .send()?
            .error_for_status()?;
        Ok(HealthReport {
            status: HealthStatus::Healthy,
            message: format!("{url} answered {}", response.status),
        })
    }

    fn provision(spec: InstanceSpec) -> Result<Instance, ProviderError> {
        if !regions().contains(&spec.region) {
            return Err(ProviderError::InvalidSpec(format!(
                "unknown region `{}`",
                spec.region
            )));
        }
        bulkhead_sdk::info!("provisioning {} in {}", spec.instance_key, spec.region);
        Ok(instance(spec.instance_key, spec.region))
    }

    fn deprovision(_instance_key: String) -> Result<(), ProviderError> {
        Ok(())
    }

    fn describe(instance_key: String) -> Result<Instance, ProviderError> {
        let region = regions().into_iter().next().unwrap_or_default();
        Ok(instance(instance_key, region))
    }

    fn list() -> Result<Vec<Instance>, ProviderError> {
        Ok(Vec::new())
    }
}

bulkhead_sdk::export_provider!(Example);

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_sdk::testing;

    fn spec(region: &str) -> InstanceSpec {
        InstanceSpec {
            instance_key: "web-1".into(),
            region: region.into(),
            artifact: "shop/web:1".into(),
            port: 8080,
            env: vec![],
            labels: vec![],
            health_check: None,
            source: None,
            size: bulkhead_sdk::InstanceSize {
                cpu_millis: 500,
                memory_mib: 512,
            },
        }
    }

    #[test]
    fn provisions_in_configured_regions_only() {
        testing::set_config("regions", "eu-west, us-east");
        testing::set_config("address", "10.0.0.7:8080");
        let made = Example::provision(spec("us-east")).unwrap();
        assert_eq!(made.provider_id, "example-web-1");
        assert_eq!(made.address.as_deref(), Some("10.0.0.7:8080"));
        assert!(
            testing::logs_take()
                .iter()
                .any(|(_, line)| line.contains("web-1"))
        );
        assert!(matches!(
            Example::provision(spec("mars")),
            Err(ProviderError::InvalidSpec(_))
        ));
    }

    #[test]
    fn health_asks_the_configured_url_and_maps_its_status() {
        use bulkhead_sdk::http::Response;
        testing::set_config("health_url", "http://status.local/ok");
        testing::set_http_handler(|request| {
            Ok(if request.url.ends_with("/ok") {
                Response::new(200, "up")
            } else {
                Response::new(503, "down")
            })
        });
        assert_eq!(
            Example::health().unwrap().message,
            "http://status.local/ok answered 200"
        );
        testing::set_config("health_url", "http://status.local/down");
        assert!(
            matches!(Example::health(), Err(ProviderError::Unavailable(message)) if message.contains("503"))
        );
    }
}
