"""An `ng_run` server (loaded through `entrypoint:`) that puts a FaultProxy in front of another server instance.

Settings: `upstream`, the name of the instance it stands in for; `hang_s` (default 600), how long a hang holds. Point the caller at this instance instead (the
collector's `+agent_name`, an agent's `resources_server` / `model_server`) and steer it through `/_faults`.
"""

import socket
import sys
from pathlib import Path

import httpx

from nemo_gym.server.base import BaseServer
from nemo_gym.server.workers import reuseport_socket

# ng_run loads this file by path in a server process whose sys.path need not hold the checkout's `tests` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.reliability.apps.fault_proxy import FaultProxy  # noqa: E402


class FaultHop(BaseServer):
    def serve(self, host: str, port: int, sock: socket.socket | None = None) -> None:
        # ng_run holds the port until it stops: a server serves on the socket it is given (server/launch.py).
        if sock is None:
            sock = reuseport_socket(host, port)
        FaultProxy(self._upstream_url, rate=0.0, seed=0, hang_s=float(self.config.get("hang_s", 600))).run(sock)

    async def _upstream_url(self) -> str:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            listing = (await client.get(f"{self.head_url}/servers")).json()["servers"]
        return next(entry["url"] for entry in listing if entry["name"] == self.config["upstream"])
