"""The server tree: `instance_name: {server_kind: {implementation: {...settings}}}`.

Same shape as NeMo Gym configs, so their YAML reads naturally here. Servers refer to each other with
`{type: <server_kind>, name: <instance_name>}`; every reference is checked before anything starts.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from pydantic import Field

from nemo_gym.config.timeouts import CONNECT_TIMEOUT_S, READ_TIMEOUT_S
from nemo_gym.config.typed import Settings, Text
from nemo_gym.errors import ConfigError

SERVER_KINDS = ("responses_api_models", "resources_servers", "responses_api_agents")


class ServerSettings(Settings):
    """Settings every server takes. A server's own are a subclass, its `Settings`, checked when the config loads.

    Keys no implementation reads (NeMo Gym's `domain`, `description`, ...) are allowed, except one a typo away
    from a setting, which is refused."""

    host: Text = "127.0.0.1"
    """Address to bind (loopback by default)."""
    port: int | None = None
    """Port to serve on (default: a free one)."""
    entrypoint: Text | None = None
    """The implementation: a module name or a .py file (default nemo_gym.<kind>.<implementation>.app)."""
    log_level: Text = "INFO"
    """Log level of this server's log."""
    startup_timeout_s: float = Field(120.0, gt=0)
    """Seconds ng_run waits for this server's /health (cover a model's cold start)."""
    connect_timeout_s: float = Field(CONNECT_TIMEOUT_S, gt=0)
    """Seconds to connect to another server."""
    read_timeout_s: float = Field(READ_TIMEOUT_S, gt=0)
    """Seconds to wait for another server's answer (default for calls without their own timeout)."""
    workers: int | None = Field(None, ge=1)
    """Processes serving this server's port (the kernel spreads connections over them, SO_REUSEPORT). Only for a
    server that keeps nothing between requests (the agents, vllm_model); default: half the cores this server may
    run on, at most 8, for those, and 1 for every other server."""
    own_process: bool = False
    """Run in a process of its own even where ng_run runs its servers together (`colocate_servers`): for a server
    whose handlers hold the CPU long enough to delay the others'."""


@dataclass(frozen=True)
class ServerRef:
    """A reference from one server's settings to another server instance."""

    type: str
    name: str


@dataclass(frozen=True)
class ServerSpec:
    """One server instance to run."""

    name: str
    kind: str
    implementation: str
    settings: dict[str, Any] = field(default_factory=dict)

    def ref(self, key: str) -> ServerRef:
        """The server reference stored under `key` in this server's settings."""
        value: Any = self.settings.get(key)
        if not _is_ref(value):
            raise ConfigError(f"server '{self.name}' needs a '{key}: {{type: ..., name: ...}}' reference")
        return ServerRef(type=value["type"], name=value["name"])


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"type", "name"} and value.get("type") in SERVER_KINDS


def _iter_refs(value: Any, path: str) -> Iterator[tuple[str, ServerRef]]:
    if _is_ref(value):
        yield path, ServerRef(type=value["type"], name=value["name"])
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _iter_refs(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _iter_refs(v, f"{path}[{i}]")


def as_server(name: str, value: Any) -> ServerSpec | None:
    if not isinstance(value, dict) or len(value) != 1:
        return None
    (kind, body), = value.items()
    if kind not in SERVER_KINDS:
        return None
    if not isinstance(body, dict) or len(body) != 1:
        raise ConfigError(f"server '{name}': '{kind}' must hold exactly one implementation, e.g. {{vllm_model: {{...}}}}")
    (implementation, settings), = body.items()
    if settings is None:
        settings = {}
    if not isinstance(settings, dict):
        raise ConfigError(f"server '{name}': settings of '{kind}.{implementation}' must be a mapping")
    return ServerSpec(name=name, kind=kind, implementation=str(implementation), settings=settings)


def server_specs(config: dict[str, Any]) -> dict[str, ServerSpec]:
    """Every server instance in the config, references unchecked (a config file read on its own, e.g. a benchmark's,
    refers to a model server that another file supplies)."""
    return {name: spec for name, value in config.items() if (spec := as_server(str(name), value))}


def parse_server_tree(config: dict[str, Any],
                      source_of: Callable[[str], str] | None = None) -> dict[str, ServerSpec]:
    """Find every server instance in the resolved config and check the references between them.

    `source_of(dotted_key)` names where a key was set, so errors can point at the file and line.
    """
    servers = server_specs(config)
    for spec in servers.values():
        for path, ref in _iter_refs(spec.settings, f"{spec.name}.{spec.kind}.{spec.implementation}"):
            target = servers.get(ref.name)
            where = f" ({source_of(path)})" if source_of else ""
            if target is None:
                known = ", ".join(sorted(n for n, s in servers.items() if s.kind == ref.type)) or "none"
                raise ConfigError(
                    f"{path}{where} refers to unknown {ref.type} server '{ref.name}' (defined {ref.type}: {known})"
                )
            if target.kind != ref.type:
                raise ConfigError(
                    f"{path}{where} refers to '{ref.name}' as {ref.type}, but it is a {target.kind} server"
                )
    return servers
