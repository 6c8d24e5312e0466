"""A stand-in for a running stack inside the test's own event loop: a head server, one agent and its environment,
all answering on one loopback port. Enough for ng_collect_rollouts and ng_reverify_rollouts called as library
functions, in a fraction of a second and with nothing to start; the test decides, through `on_run` and `on_verify`,
when and how each /run and /verify is answered."""

import asyncio
from typing import Any, Awaitable, Callable

import orjson

AGENT, ENVIRONMENT = "fake_agent", "fake_environment"
RESPONSE = {"id": "resp_test", "object": "response",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]}
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def rollout(row: dict[str, Any]) -> dict[str, Any]:
    """What the agent answers by default: the row, a response and reward 1."""
    return {**row, "response": RESPONSE, "reward": 1.0}


async def verified(row: dict[str, Any]) -> dict[str, Any]:
    """What the environment answers by default: the /verify body and reward 1."""
    return {**row, "reward": 1.0}


class InProcessStack:
    """`async with InProcessStack() as stack:` serves at `stack.url` until the block ends; every handler still
    running then is cancelled."""

    def __init__(self, on_run: Handler = rollout, on_verify: Handler = verified) -> None:
        self.on_run = on_run
        self.on_verify = on_verify
        self.url = ""
        self._handlers: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> "InProcessStack":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for handler in self._handlers:
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _answer(self, method: str, path: str, body: bytes) -> Any:
        if (method, path) == ("GET", "/servers"):
            return {"servers": [{"name": AGENT, "kind": "responses_api_agents", "implementation": "fake",
                                 "url": self.url},
                                {"name": ENVIRONMENT, "kind": "resources_servers", "implementation": "fake",
                                 "url": self.url}]}
        if (method, path) == ("GET", "/global_config"):
            return {AGENT: {"responses_api_agents": {"fake": {
                        "resources_server": {"type": "resources_servers", "name": ENVIRONMENT}}}},
                    ENVIRONMENT: {"resources_servers": {"fake": {}}}}
        if (method, path) == ("POST", "/run"):
            return await self.on_run(orjson.loads(body))
        if (method, path) == ("POST", "/verify"):
            return await self.on_verify(orjson.loads(body))
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while (request := await _read_request(reader)) is not None:
                method, path, body = request
                answer = await self._answer(method, path, body)
                status = b"200 OK" if answer is not None else b"404 Not Found"
                content = orjson.dumps(answer if answer is not None else {"detail": "not found"})
                writer.write(b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (status, len(content), content))
                await writer.drain()
        except ConnectionError:  # the client went away (a cancelled run)
            pass
        finally:
            self._handlers.discard(task)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    """One request's method, path and body (content-length or chunked); None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target = lines[0].split(" ")[:2]
    fields = [line.lower() for line in lines[1:]]
    if "transfer-encoding: chunked" in fields:
        body = b""
        while size := int((await reader.readline()).strip(), 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readexactly(2)
    else:
        length = next((int(line.split(":", 1)[1]) for line in fields if line.startswith("content-length:")), 0)
        body = await reader.readexactly(length)
    return method, target.split("?", 1)[0], body
