"""A server that calls its `peer` (another instance of itself) and says what came back, for the tests of servers
that share a process (nemo_gym.server.colocated): the same answers and failures as over HTTP."""

import asyncio
import logging
import os
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.server import BaseServer, HandlerError, json_route

logger = logging.getLogger(__name__)


class HopServer(BaseServer):
    cancelled_hangs = 0  # /hang calls ended by a cancellation reaching the handler

    def routes(self) -> list[Route]:
        return [json_route(path, handler) for path, handler in {
            "/call": self.call, "/echo": self.echo, "/refuse": self.refuse, "/downstream": self.downstream,
            "/bug": self.bug, "/hang": self.hang, "/not_json": self.not_json,
            "/cancelled_hangs": self.cancelled}.items()]

    async def call(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        """POST body["send"] to the peer's body["path"]: the reply, or the failure, and the body sent as it is after
        the call (a callee that changed what it got must not change the caller's object)."""
        sent = body["send"]
        logger.info("calling %s", body["path"])
        try:
            reply: Any = await self.servers.post(self.config["peer"]["name"], body["path"], sent,
                                                 headers={"x-probe": "p1"}, timeout_s=body.get("timeout_s"))
        except RequestFailed as exc:
            reply = {"failure_class": str(exc.failure_class), "status": exc.status, "body": exc.body}
        return {"reply": reply, "sent_after": sent, "pid": os.getpid()}

    async def echo(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        reply = {"got": dict(body), "header": request.headers.get("x-probe"), "pid": os.getpid()}
        body["changed_by_callee"] = True
        return reply

    async def refuse(self, body: Any, request: Request) -> Any:
        raise HandlerError(409, "refused on purpose", FailureClass.HTTP_4XX, detail="kept")

    async def downstream(self, body: Any, request: Request) -> Any:
        raise RequestFailed(FailureClass.CONNECT, "a server behind this one is down", status=None)

    async def bug(self, body: Any, request: Request) -> Any:
        raise ValueError("a handler bug")

    async def hang(self, body: Any, request: Request) -> Any:
        try:
            await asyncio.Event().wait()  # never set: only the caller's deadline ends it
        except asyncio.CancelledError:
            type(self).cancelled_hangs += 1
            raise

    async def cancelled(self, body: Any, request: Request) -> dict[str, int]:
        return {"cancelled_hangs": type(self).cancelled_hangs}

    async def not_json(self, body: Any, request: Request) -> Any:
        return {"not json": {1, 2}}
