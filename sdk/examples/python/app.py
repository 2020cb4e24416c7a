"""A Bulkhead provider plugin in Python (contract bulkhead:provider@0.7.0).

Its "cloud" is its configuration, like the Rust `example` plugin: `regions` (comma-separated,
default `local`) and `address` (where instances answer). It shows the parts of the contract a
plugin in another language uses: the exported `Adapter`, the host's configuration, logging and
cache, typed errors raised as `Err(...)`, declared configuration, and logs (each instance's
"output" is what the plugin noted about it, kept in the host's cache and numbered: the cursor
is the number of the last line read).

Build (see sdk/README.md): componentize-py --wit-path ../../wit --world provider componentize app -o provider.wasm
"""

import json
import time
from typing import List, Optional

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
    LogLine,
    LogPage,
    LogRequest,
    LogStream,
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
        # Nothing to say of its state (a failed instance would say why).
        detail=None,
        # This "cloud" has no machine types to choose from for the spec's size.
        machine_type=None,
    )


def noted(key: str) -> list:
    """What the plugin noted about instance `key`: [number, time in ms, text], oldest first."""
    return json.loads((host.cache_get("log/" + key) or b"[]").decode())


def note(key: str, text: str) -> None:
    lines = noted(key)
    number = lines[-1][0] + 1 if lines else 1
    lines.append([number, int(time.time() * 1000), text])
    host.cache_set("log/" + key, json.dumps(lines[-100:]).encode(), 86400)


class Adapter(exports.Adapter):
    def info(self) -> ProviderInfo:
        return ProviderInfo(
            name="python-example",
            version="0.1.0",
            regions=regions(),
            capabilities=["logs"],
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
        note(spec.instance_key, "provisioned in %s" % spec.region)
        return instance(spec.instance_key, spec.region)

    def deprovision(self, instance_key: str) -> None:
        return None

    def describe(self, instance_key: str) -> Instance:
        return instance(instance_key, regions()[0])

    def list(self) -> List[Instance]:
        return []

    def logs(self, instance_key: str, request: LogRequest) -> LogPage:
        lines = noted(instance_key)
        after: Optional[int] = None
        if request.after is not None:
            try:
                after = int(request.after)
            except ValueError:
                raise Err(ProviderError_InvalidSpec("`%s` is not a cursor of this plugin" % request.after))
            lines = [line for line in lines if line[0] > after]
        elif request.since_ms is not None:
            lines = [line for line in lines if line[1] >= request.since_ms]
        else:
            lines = lines[-request.max_lines:]
        page = lines[: request.max_lines]
        if page:
            cursor = str(page[-1][0])
        elif after is not None:
            cursor = str(after)
        else:
            everything = noted(instance_key)
            cursor = str(everything[-1][0] if everything else 0)
        return LogPage(
            lines=[LogLine(time_ms=t, stream=LogStream.SYSTEM, text=text[: request.max_bytes]) for _, t, text in page],
            next=cursor,
            gap=False,
        )
