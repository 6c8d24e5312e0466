"""Find servers by instance name through the head server, call them, and ask it whether they are all healthy."""

from typing import Any

from nemo_gym.compat.head_detect import NATIVE, HeadKind, detect_head, nemo_gym_global_config
from nemo_gym.http_client import HttpClient, RequestFailed, get_json_blocking
from nemo_gym.errors import DownstreamError, NemoGymError
from nemo_gym.server import in_process

def fetch_status(head_url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The head server's `GET /status` (blocking): {"all_healthy": bool, "servers": [{name, kind, implementation,
    url, health}]}. Raises DownstreamError when no head server answers."""
    try:
        return get_json_blocking(f"{head_url}/status", timeout_s)
    except RequestFailed as exc:
        raise DownstreamError(f"no head server at {head_url} ({exc.failure_class}); is `ng_run` running?") from None


class ServerClient:
    """Looks up server instances on the head server once, then calls them by name.

    The head server may be ours or NeMo Gym 0.4.0's (`head_kind` says which after the first lookup).
    """

    def __init__(self, head_url: str, http: HttpClient) -> None:
        self.head_url = head_url.rstrip("/")
        self.http = http
        self._servers: dict[str, dict[str, Any]] | None = None
        self.head_kind: HeadKind | None = None

    async def servers(self, refresh: bool = False) -> dict[str, dict[str, Any]]:
        """{instance name: {kind, implementation, url}} for every running server."""
        if self._servers is None or refresh:
            listing = await detect_head(self.http, self.head_url)
            self.head_kind = listing.kind
            self._servers = {entry["name"]: entry for entry in listing.servers}
        return self._servers

    async def url(self, name: str) -> str:
        servers = await self.servers()
        if name not in servers:
            servers = await self.servers(refresh=True)
        if name not in servers:
            raise NemoGymError(f"no server named '{name}' is running (running: {', '.join(sorted(servers))})")
        return servers[name]["url"]

    async def post(self, name: str, path: str, body: Any, **kwargs: Any) -> Any:
        here = in_process.answer_of(name, path)
        if here is not None:  # a server of this process (server/colocated.py): the same answer, without HTTP
            return await self.http.post_json(here[0], body, in_process=here[1], **kwargs)
        return await self.http.post_json(f"{await self.url(name)}{path}", body, **kwargs)

    async def global_config(self) -> dict[str, Any]:
        """The merged config, with secrets redacted by our head server (NeMo Gym's serves them as they are)."""
        await self.servers()
        if self.head_kind != NATIVE:
            return await nemo_gym_global_config(self.http, self.head_url)
        return await self.http.get_json(f"{self.head_url}/global_config", timeout_s=10)
