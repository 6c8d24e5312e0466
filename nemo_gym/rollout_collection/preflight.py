"""The preflight of a collection run: every model endpoint is checked before the first rollout (and by +dry_run=true),
so that a wrong URL, key or model name is one line, exit 2, within seconds, with nothing started or written.

ng_collect_rollouts asks each running model server (`GET /preflight`, nemo_gym.responses_api_models.preflight),
which checks its own endpoints with its own key, from where it runs (its proxy settings included).
ng_e2e_collect_rollouts checks the endpoints of its config itself before it starts any server (config_preflight).
"""

import asyncio
from typing import Callable

from nemo_gym.errors import DownstreamError, NemoGymError
from nemo_gym.failures import RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.responses_api_models.preflight import PREFLIGHT_PATH, PREFLIGHT_TIMEOUT_S, EndpointCheck
from nemo_gym.server.client import ServerClient

MODELS_KIND = "responses_api_models"
# A model server's answer covers its endpoints' checks, each within PREFLIGHT_TIMEOUT_S.
_SERVER_TIMEOUT_S = PREFLIGHT_TIMEOUT_S + 3.0


class PreflightError(NemoGymError):
    """A model endpoint is unreachable, refuses the key or does not serve the model: fix the config first."""


Say = Callable[[str], None]


def conclude(checks: list[EndpointCheck], say: Say) -> None:
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
    conclude(checks, say)
    return checks
