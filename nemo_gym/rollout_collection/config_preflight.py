"""ng_e2e_collect_rollouts' preflight: the endpoints of its config are checked before it starts any server, so that
a wrong URL, key or model name is one line, exit 2, within seconds. A model server it starts itself
(local_vllm_model) has nothing to check yet and is asked once it runs (preflight.preflight_servers).
Apart from `preflight`, which ng_collect_rollouts loads: this reads the model servers' settings classes.
"""

import asyncio
from urllib.parse import urlsplit

from nemo_gym.config.loader import GlobalConfig
from nemo_gym.config.model_servers import VLLMModelSettings
from nemo_gym.http_client import HttpClient
from nemo_gym.loopback import is_loopback
from nemo_gym.responses_api_models.openai_model.app import OpenAIModelServer, OpenAIModelSettings
from nemo_gym.responses_api_models.preflight import PREFLIGHT_TIMEOUT_S, EndpointCheck, check_endpoint
from nemo_gym.responses_api_models.vllm_model.app import VLLMModelServer
from nemo_gym.rollout_collection.preflight import MODELS_KIND, Say, conclude
from nemo_gym.server.base import server_settings


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
    conclude(checks, say)
    return checks
