"""A minimal server for framework tests: echoes its body and reports its pid."""

import logging
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
        # `ready_file`: "starting" until this file exists (the test says when loading ends); each /health asked
        # meanwhile logs that it is still waiting, as a loading model logs its progress.
        self._ready_file = self.config.get("ready_file")

    def ready(self) -> bool:
        if self._ready_file and not os.path.exists(self._ready_file):
            logging.getLogger(__name__).info("loading: waiting for %s", self._ready_file)
            return False
        return time.monotonic() >= self._ready_at

    async def echo(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        return {"echo": body, "name": self.name, "pid": os.getpid()}

    def routes(self) -> list[Route]:
        return [json_route("/echo", self.echo)]
