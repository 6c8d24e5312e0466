"""A minimal server for framework tests: echoes its body and reports its pid."""

import os
import time
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.server import BaseServer, json_route


class EchoServer(BaseServer):
    async def startup(self) -> None:
        if self.config.get("crash_on_start"):
            raise RuntimeError("crash_on_start is set")
        # `ready_after_s`: /health answers 503 "starting" this long, like a server loading a model.
        self._ready_at = time.monotonic() + float(self.config.get("ready_after_s", 0))

    def ready(self) -> bool:
        return time.monotonic() >= self._ready_at

    async def echo(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return {"echo": body, "name": self.name, "pid": os.getpid()}

    def routes(self) -> list[Route]:
        return [json_route("/echo", self.echo)]
