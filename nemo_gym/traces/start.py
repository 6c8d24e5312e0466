"""Turning traces on in a process, and handing the setting to the server processes ng_run starts.

The commands that run rollouts read `+traces.*` from their config (nemo_gym.config.traces) and call `start_tracing`;
ng_run passes the section to each server in `TRACES_ENV`, and each server process (each worker, after the fork: the
exporter's thread does not survive one) calls `start_from_environment` before it builds its app. With traces off
neither imports opentelemetry, and `switch.ACTIVE` stays None.
"""

import importlib
import os
from typing import Any, Mapping

import orjson

from nemo_gym.config.global_settings import LoaderSettings
from nemo_gym.config.traces import TracesSettings
from nemo_gym.config.typed import build
from nemo_gym.errors import ConfigError
from nemo_gym.traces import switch

TRACES_ENV = "NEMO_GYM_TRACES"
NAMESPACE = "nemo_gym"
_EXTRA_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")


def require_extra() -> None:
    """A ConfigError unless the `traces` extra is installed: checked before anything starts."""
    for module in _EXTRA_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"+traces.otlp_endpoint is set, but the traces extra is not installed ({exc}); "
                              f"pip install 'nemo_gym[traces]', or leave +traces.otlp_endpoint unset") from None


def start_tracing(settings: TracesSettings, name: str, **resource: str) -> None:
    """Trace this process as `name` (its service.name unless `settings.service_names` renames it), when `settings`
    name an endpoint; `resource` adds attributes of the process (its server kind, ...)."""
    url = settings.traces_url
    if url is None or switch.ACTIVE is not None:
        return
    require_extra()
    from nemo_gym.traces.otel import Tracing  # opentelemetry loads here, and only here

    switch.ACTIVE = Tracing(url, {"service.name": settings.service_name(name), "service.namespace": NAMESPACE,
                                  **resource})


def start_for_command(values: Mapping[str, Any], command: str) -> None:
    """Trace a command's own process (the collector's rollouts) as its config's `traces` section says."""
    start_tracing(build(LoaderSettings, values).traces, command)


def stop_tracing() -> None:
    """Export the spans still buffered and turn traces off."""
    tracing, switch.ACTIVE = switch.ACTIVE, None
    if tracing is not None:
        tracing.stop()


def child_environment(settings: TracesSettings) -> dict[str, str]:
    """What a server process needs in its environment to trace as `settings` say (empty while traces are off, over
    any value this process inherited)."""
    return {TRACES_ENV: settings.model_dump_json() if settings.traces_url else ""}


def start_from_environment(name: str, **resource: str) -> None:
    """`start_tracing` with the settings ng_run put in `TRACES_ENV`, if it put any."""
    raw = os.environ.get(TRACES_ENV)
    if raw:
        start_tracing(build(TracesSettings, orjson.loads(raw), name=lambda field: f"+traces.{field}"), name,
                      **resource)
