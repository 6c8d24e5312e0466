"""Serve a Starlette app from a thread of the test process on a free loopback port, for the unit tests here."""

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.helpers.stack import free_port


@contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """Yield the base URL while `app` answers there; stop it afterwards."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                                          loop="asyncio"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"test server on port {port} did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def json_app(routes: dict[str, Any], posted: list | None = None) -> Starlette:
    """An app answering each `path` with `routes[path]` (a value, or a callable of the decoded body) to GET and
    POST; POST bodies are appended to `posted`."""

    def endpoint(answer: Any):
        async def handle(request: Request) -> JSONResponse:
            body = await request.json() if request.method == "POST" else None
            if posted is not None and request.method == "POST":
                posted.append(body)
            return JSONResponse(answer(body) if callable(answer) else answer)
        return handle

    return Starlette(routes=[Route(path, endpoint(answer), methods=["GET", "POST"]) for path, answer in routes.items()])
