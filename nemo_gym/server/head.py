"""The head server: holds the merged config (secrets redacted) and the address of every server instance."""

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.compat.head_endpoints import global_config_yaml, server_instances
from nemo_gym.config.redact import redact_secrets
from nemo_gym.config.servers import ServerSpec
from nemo_gym.server.base import BaseServer, json_route

HEAD_SERVER_NAME = "head_server"


class HeadServer(BaseServer):
    """Answers `GET /servers` and `GET /global_config`, and NeMo Gym 0.4.0's `GET /server_instances` and
    `GET /global_config_dict_yaml`; never serves a secret."""

    def __init__(self, global_config: dict[str, Any], servers: list[dict[str, Any]], address: tuple[str, int]) -> None:
        """`address` is where this head server listens: NeMo Gym's clients read it back from the config."""
        super().__init__(ServerSpec(name=HEAD_SERVER_NAME, kind="head", implementation="head"))
        self._redacted_config = redact_secrets(global_config)
        self._servers = servers
        self._nemo_gym_yaml = global_config_yaml(self._redacted_config, servers, *address)

    async def _servers_listing(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return {"servers": self._servers}

    async def _global_config(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return self._redacted_config

    async def _server_instances(self, body: dict[str, Any], request: Request) -> list[dict[str, Any]]:
        return server_instances(self._servers)

    async def _global_config_dict_yaml(self, body: dict[str, Any], request: Request) -> str:
        return self._nemo_gym_yaml

    def routes(self) -> list[Route]:
        return [
            json_route("/servers", self._servers_listing, methods=("GET",)),
            json_route("/global_config", self._global_config, methods=("GET",)),
            json_route("/server_instances", self._server_instances, methods=("GET",)),
            json_route("/global_config_dict_yaml", self._global_config_dict_yaml, methods=("GET",)),
        ]
