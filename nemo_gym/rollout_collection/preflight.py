"""The preflight of a collection run: every model endpoint is checked before the first rollout (and by +dry_run=true),
so that a wrong URL, key or model name is one line, exit 2, within seconds, with nothing started or written.

ng_collect_rollouts asks each running model server (`GET /preflight`, nemo_gym.responses_api_models.preflight),
which checks its own endpoints with its own key, from where it runs (its proxy settings included).
ng_e2e_collect_rollouts checks the endpoints of its config itself before it starts any server; a model server it
starts itself (local_vllm_model) has nothing to check yet and is asked once it runs.
"""

import asyncio
from typing import Callable
from urllib.parse import urlsplit

from nemo_gym.config.loader import GlobalConfig
from nemo_gym.config.model_servers import VLLMModelSettings
from nemo_gym.errors import DownstreamError, NemoGymError
from nemo_gym.failures import RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.loopback import is_loopback
from nemo_gym.responses_api_models.openai_model.app import OpenAIModelServer, OpenAIModelSettings
from nemo_gym.responses_api_models.preflight import (
    PREFLIGHT_PATH,
    PREFLIGHT_TIMEOUT_S,
    EndpointCheck,
    check_endpoint,
)
from nemo_gym.responses_api_models.vllm_model.app import VLLMModelServer
from nemo_gym.server.base import server_settings
from nemo_gym.server.client import ServerClient

MODELS_KIND = "responses_api_models"
# A model server's answer covers its endpoints' checks, each within PREFLIGHT_TIMEOUT_S.
_SERVER_TIMEOUT_S = PREFLIGHT_TIMEOUT_S + 3.0


class PreflightError(NemoGymError):
    """A model endpoint is unreachable, refuses the key or does not serve the model: fix the config first."""


Say = Callable[[str], None]


def _conclude(checks: list[EndpointCheck], say: Say) -> None:
    """Say each fine endpoint; raise the first problem as one line."""
    bad = [check for check in checks if check.problem]
    if bad:
        raise PreflightError("; ".join(check.line() for check in bad) + "; nothing was run")
    for check in checks:
        say(f"preflight: {check.line()}")


async def _server_checks(http: HttpClient, name: str, url: str) -> list[EndpointCheck]:
    try:
        answer = await http.get_json(f"{url}{PREFLIGHT_PATH}", timeout_s=_SERVER_TIMEOUT_S)
    except RequestFailed as exc:
        if exc.status == 404:
            return []  # a model server without a preflight (someone else's): nothing to check
        raise DownstreamError(f"model server '{name}' at {url} did not answer its preflight: {exc.message}") from None
    checks = answer.get("checks") if isinstance(answer, dict) else None
    return [EndpointCheck.from_dict(check) for check in checks or [] if isinstance(check, dict)]


async def preflight_servers(servers: ServerClient, say: Say = print) -> list[EndpointCheck]:
    """Ask every model server the head server lists to check its endpoints; PreflightError on the first problem."""
    listing = await servers.servers()
    models = {name: entry["url"] for name, entry in sorted(listing.items()) if entry.get("kind") == MODELS_KIND}
    results = await asyncio.gather(*(_server_checks(servers.http, name, url) for name, url in models.items()))
    checks = [check for result in results for check in result]
    _conclude(checks, say)
    return checks


def _stack_addresses(global_config: GlobalConfig) -> set[tuple[str, int]]:
    """(host, port) of every server of the config with a fixed port: an endpoint there is one this run starts."""
    return {(str(spec.settings.get("host") or "127.0.0.1"), port) for spec in global_config.servers().values()
            if isinstance(port := spec.settings.get("port"), int)}


def _started_by_this_run(url: str, stack: set[tuple[str, int]]) -> bool:
    parsed = urlsplit(url)
    host, port = parsed.hostname, parsed.port
    if host is None or port is None:
        return False
    return any(port == stack_port and (host == stack_host or (is_loopback(host) and is_loopback(stack_host)))
               for stack_host, stack_port in stack)


def _configured_endpoints(global_config: GlobalConfig) -> list[tuple[str, str, str | None, str]]:
    """(server, base URL, key, model) of every model server in the config that calls an endpoint already running:
    not one a server of this same config will serve (its model server checks it once the stack runs)."""
    stack = _stack_addresses(global_config)
    endpoints: list[tuple[str, str, str | None, str]] = []
    for spec in global_config.servers().values():
        if spec.kind != MODELS_KIND or spec.settings.get("entrypoint"):
            continue
        if spec.implementation == "vllm_model":
            vllm = server_settings(VLLMModelServer, spec)
            assert isinstance(vllm, VLLMModelSettings)
            urls = [vllm.base_url] if isinstance(vllm.base_url, str) else list(vllm.base_url or [])
            endpoints += [(spec.name, url, vllm.api_key, vllm.model or "") for url in urls]
        elif spec.implementation == "openai_model":
            openai = server_settings(OpenAIModelServer, spec)
            assert isinstance(openai, OpenAIModelSettings)
            endpoints.append((spec.name, openai.base_url, openai.api_key, openai.model))
    return [endpoint for endpoint in endpoints if not _started_by_this_run(endpoint[1], stack)]


async def preflight_config(global_config: GlobalConfig, say: Say = print) -> list[EndpointCheck]:
    """Check the endpoints the config's model servers would call, before any server starts."""
    http = HttpClient(connect_timeout_s=PREFLIGHT_TIMEOUT_S, read_timeout_s=PREFLIGHT_TIMEOUT_S)
    try:
        checks = list(await asyncio.gather(*(check_endpoint(http, server, url, key, model)
                                              for server, url, key, model in _configured_endpoints(global_config))))
    finally:
        await http.aclose()
    _conclude(checks, say)
    return checks
