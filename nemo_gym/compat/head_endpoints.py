"""What our head server answers to NeMo Gym 0.4.0 clients (its `ng_collect_rollouts`, `ng_status`).

NeMo Gym's client reads `GET /global_config_dict_yaml`: a JSON string holding the merged config as YAML, in which
every server instance carries the `host` and `port` it listens on (that is how NeMo Gym finds a server by name).
`GET /server_instances` lists the instances for its status command. The config given here is already redacted.
"""

import copy
from typing import Any
from urllib.parse import urlsplit

import yaml


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", int(parts.port or 80)


def server_instances(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our listing (`[{name, kind, implementation, url}]`) as NeMo Gym's `/server_instances` entries."""
    instances = []
    for server in servers:
        host, port = _host_port(server["url"])
        instances.append({"process_name": server["name"], "server_type": server["kind"],
                          "name": server["implementation"], "host": host, "port": port, "url": server["url"],
                          "config_path": server["name"]})
    return instances


def config_with_addresses(config: dict[str, Any], servers: list[dict[str, Any]], head_host: str,
                          head_port: int) -> dict[str, Any]:
    """A copy of `config` where each running server's settings hold its host and port, and `head_server` ours."""
    merged = copy.deepcopy(config)
    for server in servers:
        host, port = _host_port(server["url"])
        settings = merged.setdefault(server["name"], {}).setdefault(server["kind"], {})
        settings = settings.setdefault(server["implementation"], {})
        if settings is None:  # `impl: null` in YAML means no settings
            settings = merged[server["name"]][server["kind"]][server["implementation"]] = {}
        settings.update(host=host, port=port)
    merged["head_server"] = {**(merged.get("head_server") or {}), "host": head_host, "port": head_port}
    return merged


def global_config_yaml(config: dict[str, Any], servers: list[dict[str, Any]], head_host: str, head_port: int) -> str:
    """The body of `/global_config_dict_yaml` (before JSON encoding): YAML of the config with addresses."""
    return yaml.safe_dump(config_with_addresses(config, servers, head_host, head_port), sort_keys=False)
