"""The head server: holds the merged config (secrets redacted) and the address of every server instance, and says
whether every server is healthy (`GET /status`: what scripts and ng_status wait on, instead of reading logs)."""

import asyncio
from typing import Any, Callable

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.compat.head_endpoints import global_config_yaml, server_instances
from nemo_gym.config.redact import redact_secrets
from nemo_gym.config.servers import ServerSpec
from nemo_gym.failures import RequestFailed
from nemo_gym.server.base import BaseServer, json_route
from nemo_gym.server.startup_progress import Starting

HEAD_SERVER_NAME = "head_server"
HEALTHY = "ok"  # a server's /health status once it takes work
_PROBE_TIMEOUT_S = 2.0


class HeadServer(BaseServer):
    """Answers `GET /servers`, `GET /status` and `GET /global_config`, and NeMo Gym 0.4.0's `GET /server_instances`
    and `GET /global_config_dict_yaml`; never serves a secret."""

    def __init__(self, global_config: dict[str, Any], servers: list[dict[str, Any]], address: tuple[str, int],
                 starting: Callable[[str], Starting | None] | None = None) -> None:
        """`address` is where this head server listens: NeMo Gym's clients read it back from the config.
        `starting` says how long a server has been starting and what it logged last (ng_run's supervisor knows)."""
        super().__init__(ServerSpec(name=HEAD_SERVER_NAME, kind="head", implementation="head"))
        self._starting = starting
        self._redacted_config = redact_secrets(global_config)
        self._servers = servers
        self._nemo_gym_yaml = global_config_yaml(self._redacted_config, servers, *address)

    async def _servers_listing(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return {"servers": self._servers}

    async def _probe(self, server: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = await self.http.get_json(f"{server['url']}/health", timeout_s=_PROBE_TIMEOUT_S)
            health = answer.get("status", "?") if isinstance(answer, dict) else "?"
        except RequestFailed as exc:
            # A server still loading answers 503 {"status": "starting"}; one not listening yet is unreachable.
            body = exc.body if isinstance(exc.body, dict) else {}
            health = body.get("status") or ("unreachable" if exc.status is None else f"HTTP {exc.status}")
        probed = {**server, "health": health}
        starting = self._starting(server["name"]) if self._starting and health != HEALTHY else None
        if starting is not None:
            probed.update(starting_s=round(starting.started_s, 1), last_log_line=starting.last_log_line)
        return probed

    async def _status(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        """Every server with its /health answer right now, and whether all of them are healthy."""
        servers = await asyncio.gather(*(self._probe(server) for server in self._servers))
        return {"all_healthy": all(s["health"] == HEALTHY for s in servers), "servers": list(servers)}

    async def _global_config(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return self._redacted_config

    async def _server_instances(self, body: dict[str, Any], request: Request) -> list[dict[str, Any]]:
        return server_instances(self._servers)

    async def _global_config_dict_yaml(self, body: dict[str, Any], request: Request) -> str:
        return self._nemo_gym_yaml

    def routes(self) -> list[Route]:
        return [
            json_route("/servers", self._servers_listing, methods=("GET",)),
            json_route("/status", self._status, methods=("GET",)),
            json_route("/global_config", self._global_config, methods=("GET",)),
            json_route("/server_instances", self._server_instances, methods=("GET",)),
            json_route("/global_config_dict_yaml", self._global_config_dict_yaml, methods=("GET",)),
        ]
