"""A Bulkhead provider plugin in Python (contract bulkhead:provider@0.4.0).

Its "cloud" is its configuration, like the Rust `example` plugin: `regions` (comma-separated,
default `local`) and `address` (where instances answer). It shows the parts of the contract a
plugin in another language uses: the exported `Adapter`, the host's configuration, logging and
cache, typed errors raised as `Err(...)`, and declared configuration.

Build (see sdk/README.md): componentize-py --wit-path ../../wit --world provider componentize app -o provider.wasm
"""

from typing import List

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.bulkhead_provider_types import (
    ConfigKey,
    HealthReport,
    HealthStatus,
    Instance,
    InstanceSpec,
    InstanceState,
    ProviderError_InvalidSpec,
    ProviderError_Misconfigured,
    ProviderInfo,
    WorkloadHealth,
)


def regions() -> List[str]:
    configured = host.config_get("regions") or "local"
    return [region.strip() for region in configured.split(",") if region.strip()]


def instance(key: str, region: str) -> Instance:
    return Instance(
        instance_key=key,
        provider_id="py-" + key,
        region=region,
        state=InstanceState.RUNNING,
        address=host.config_get("address"),
        # This "cloud" does not check its workloads: Bulkhead does.
        health=WorkloadHealth.UNCHECKED,
    )


class Adapter(exports.Adapter):
    def info(self) -> ProviderInfo:
        return ProviderInfo(
            name="python-example",
            version="0.1.0",
            regions=regions(),
            capabilities=[],
            config=[
                ConfigKey(name="address", required=True, secret=False,
                          description="Where instances answer (host:port)"),
                ConfigKey(name="regions", required=False, secret=False,
                          description="Comma-separated regions (default: local)"),
            ],
        )

    def health(self) -> HealthReport:
        # The provider's cache survives between calls: count the health checks in it.
        checks = int((host.cache_get("checks") or b"0").decode()) + 1
        host.cache_set("checks", str(checks).encode(), 3600)
        return HealthReport(status=HealthStatus.HEALTHY, message="health check %d" % checks)

    def provision(self, spec: InstanceSpec) -> Instance:
        if host.config_get("address") is None:
            raise Err(ProviderError_Misconfigured("the configuration value `address` is not set"))
        if spec.region not in regions():
            raise Err(ProviderError_InvalidSpec("unknown region `%s`" % spec.region))
        host.log(host.LogLevel.INFO, "provisioning %s in %s" % (spec.instance_key, spec.region))
        return instance(spec.instance_key, spec.region)

    def deprovision(self, instance_key: str) -> None:
        return None

    def describe(self, instance_key: str) -> Instance:
        return instance(instance_key, regions()[0])

    def list(self) -> List[Instance]:
        return []
