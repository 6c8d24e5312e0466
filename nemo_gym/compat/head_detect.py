"""Which kind of head server a URL is, and its server listing in this toolkit's shape.

Ours answers `GET /servers` with `{"servers": [{name, kind, implementation, url}]}`. NeMo Gym 0.4.0's has no such
route (404) and answers `GET /server_instances` with a list of `{process_name, server_type, name, host, port, url}`:
`process_name` is the instance name, `server_type` the kind (e.g. `responses_api_agents`), `name` the
implementation. Asking `/servers` first costs one request against ours, which is the common case.
"""

from dataclasses import dataclass
from typing import Any, Literal

import yaml

from nemo_gym.errors import DownstreamError
from nemo_gym.http_client import HttpClient, RequestFailed

HeadKind = Literal["native", "nemo_gym"]
NATIVE: HeadKind = "native"
NEMO_GYM: HeadKind = "nemo_gym"
_TIMEOUT_S = 10.0


class HeadServerError(DownstreamError):
    """The head server is unreachable or answers in neither known shape."""


@dataclass(frozen=True)
class HeadListing:
    kind: HeadKind
    servers: list[dict[str, Any]]  # [{name, kind, implementation, url}]


def servers_from_instances(instances: Any, head_url: str) -> list[dict[str, Any]]:
    """NeMo Gym's `/server_instances` list as `[{name, kind, implementation, url}]`."""
    if not isinstance(instances, list):
        raise HeadServerError(f"{head_url}/server_instances did not answer with a list: {str(instances)[:200]}")
    servers = []
    for entry in instances:
        if not isinstance(entry, dict) or not entry.get("process_name"):
            raise HeadServerError(f"{head_url}/server_instances holds an entry without process_name: {entry!r}")
        url = entry.get("url") or (
            f"http://{entry['host']}:{entry['port']}" if entry.get("host") and entry.get("port") else None
        )
        if not url:
            raise HeadServerError(f"{head_url}/server_instances: '{entry['process_name']}' has no url or host/port")
        servers.append({"name": entry["process_name"], "kind": entry.get("server_type"),
                        "implementation": entry.get("name"), "url": str(url).rstrip("/")})
    return servers


def _unreachable(head_url: str, exc: RequestFailed) -> HeadServerError:
    return HeadServerError(f"cannot reach the head server at {head_url} ({exc.message}); is `ng_run` running?")


async def detect_head(http: HttpClient, head_url: str) -> HeadListing:
    """Ask `head_url` for its servers, in whichever protocol it speaks."""
    try:
        listing = await http.get_json(f"{head_url}/servers", timeout_s=_TIMEOUT_S)
    except RequestFailed as exc:
        if exc.status != 404:
            raise _unreachable(head_url, exc) from None
    else:
        if not isinstance(listing, dict) or not isinstance(listing.get("servers"), list):
            raise HeadServerError(f"{head_url}/servers answered in an unknown shape: {str(listing)[:200]}")
        return HeadListing(NATIVE, listing["servers"])
    try:
        instances = await http.get_json(f"{head_url}/server_instances", timeout_s=_TIMEOUT_S)
    except RequestFailed as exc:
        if exc.status == 404:
            raise HeadServerError(f"{head_url} is no head server: neither /servers nor /server_instances exists")
        raise _unreachable(head_url, exc) from None
    return HeadListing(NEMO_GYM, servers_from_instances(instances, head_url))


def parse_global_config_yaml(payload: Any, head_url: str) -> dict[str, Any]:
    """NeMo Gym's `/global_config_dict_yaml` answer (a JSON string holding YAML text) as a dict."""
    if not isinstance(payload, str):
        raise HeadServerError(f"{head_url}/global_config_dict_yaml did not answer with a JSON string")
    try:
        config = yaml.safe_load(payload)
    except yaml.YAMLError as exc:
        raise HeadServerError(f"{head_url}/global_config_dict_yaml holds invalid YAML: {exc}") from None
    if not isinstance(config, dict):
        raise HeadServerError(f"{head_url}/global_config_dict_yaml does not hold a mapping")
    return config


async def nemo_gym_global_config(http: HttpClient, head_url: str) -> dict[str, Any]:
    try:
        payload = await http.get_json(f"{head_url}/global_config_dict_yaml", timeout_s=_TIMEOUT_S)
    except RequestFailed as exc:
        raise _unreachable(head_url, exc) from None
    return parse_global_config_yaml(payload, head_url)
