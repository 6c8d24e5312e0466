"""Find servers by instance name through the head server, call them, and ask it whether they are all healthy."""

from typing import Any

import httpx

from nemo_gym.http_client import HttpClient, RequestFailed
from nemo_gym.errors import DownstreamError, NemoGymError

DEFAULT_HEAD_HOST = "127.0.0.1"
DEFAULT_HEAD_PORT = 11000


def head_url_from_config(config: dict[str, Any]) -> str:
    head = config.get("head_server") or {}
    return f"http://{head.get('host', DEFAULT_HEAD_HOST)}:{int(head.get('port', DEFAULT_HEAD_PORT))}"


def fetch_status(head_url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The head server's `GET /status` (blocking): {"all_healthy": bool, "servers": [{name, kind, implementation,
    url, health}]}. Raises DownstreamError when no head server answers."""
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            response = client.get(f"{head_url}/status")
            response.raise_for_status()
            return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise DownstreamError(f"no head server at {head_url} ({type(exc).__name__}); is `ng_run` running?") from None


class ServerClient:
    """Looks up server instances on the head server once, then calls them by name."""

    def __init__(self, head_url: str, http: HttpClient) -> None:
        self.head_url = head_url.rstrip("/")
        self.http = http
        self._servers: dict[str, dict[str, Any]] | None = None

    async def servers(self, refresh: bool = False) -> dict[str, dict[str, Any]]:
        """{instance name: {kind, implementation, url}} for every running server."""
        if self._servers is None or refresh:
            try:
                listing = await self.http.get_json(f"{self.head_url}/servers", timeout_s=10)
            except RequestFailed as exc:
                raise DownstreamError(
                    f"cannot reach the head server at {self.head_url} ({exc.message}); is `ng_run` running?"
                ) from None
            self._servers = {entry["name"]: entry for entry in listing["servers"]}
        return self._servers

    async def url(self, name: str) -> str:
        servers = await self.servers()
        if name not in servers:
            servers = await self.servers(refresh=True)
        if name not in servers:
            raise NemoGymError(f"no server named '{name}' is running (running: {', '.join(sorted(servers))})")
        return servers[name]["url"]

    async def post(self, name: str, path: str, body: Any, **kwargs: Any) -> Any:
        return await self.http.post_json(f"{await self.url(name)}{path}", body, **kwargs)

    async def global_config(self) -> dict[str, Any]:
        """The merged config, with secrets redacted by the head server."""
        return await self.http.get_json(f"{self.head_url}/global_config", timeout_s=10)
