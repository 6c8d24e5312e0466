"""A fault-injecting HTTP/1.1 proxy for the reliability suite.

Each request is forwarded to the upstream, except for the ones picked for one of:
    latency   forward after a 50-300 ms pause
    http_503  answer 503 without forwarding
    reset     abort the connection with a TCP RST
    hang      never answer; hold the connection until the client gives up (or `hang_s` passes)
    truncate  forward, then send the full Content-Length header but only half the body, and close
Two ways to pick: `rate`, a seeded draw over all requests (0 turns it off), or `plan`, task index -> fault, applied
to the first request of that rollout through this proxy (the rollout's task index comes from the body's
`_ng_task_index`, from a session id seen with one, or from the "Question N" of the weather rows). `injected` counts
what was done, `injected_keys` records which rollout got which fault.

It runs on its own event loop in a background thread (`start`), or as the whole process (`run`, used by fault_hop.py,
which puts it between two servers of an `ng_run` stack). `GET /_faults` answers the record and `POST /_faults` sets
the plan, so a test can steer a proxy in another process; `GET /health` is answered here, never forwarded.
"""

import asyncio
import random
import re
import socket
import struct
import threading
from collections import Counter
from http import HTTPStatus
from typing import Awaitable, Callable

import httpx
import orjson

from nemo_gym.protocol import SESSION_HEADER

FAULTS = ("latency", "http_503", "reset", "hang", "truncate")
_HOP_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding"}
_QUESTION = re.compile(rb"Question (\d+):")
Request = tuple[str, str, dict[str, str], bytes]


# Longer than any timeout a test sets on the stack around the proxy, so that a hang ends at the timeout under test
# (the caller's), never at this one. It was 30 s, equal to the collector's rollout timeout in test_fault_proxy: a race
# the collector won only because its timer started a few milliseconds before this one.
FORWARD_TIMEOUT_S = 120.0


def _head(status: int, content_type: str, length: int) -> bytes:
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {length}\r\n\r\n").encode()


class FaultProxy:
    def __init__(self, upstream: str | Callable[[], Awaitable[str]], rate: float, seed: int,
                 hang_s: float = 10.0) -> None:
        self.upstream = upstream
        self.rate = rate
        self.hang_s = hang_s
        self.plan: dict[int, str] = {}
        self.injected: Counter[str] = Counter()
        self.injected_keys: dict[int, str] = {}
        self.requests = 0
        self._sessions: dict[str, int] = {}
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault_proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._client: httpx.AsyncClient | None = None

    def start(self, port: int = 0) -> int:
        """Listen on loopback `port` (0: a free one) from a background thread; returns the port."""
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self._listen("127.0.0.1", port), self._loop).result(timeout=60)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=60)

    def run(self, sock: socket.socket) -> None:
        """Serve on `sock` (bound, not yet listening: what ng_run gives a server) in this thread until the process
        is stopped."""
        self._loop.run_until_complete(self._listen(sock=sock))
        self._loop.run_forever()

    async def _listen(self, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None) -> int:
        if sock is not None:
            self._server = await asyncio.start_server(self._connection, sock=sock)
        else:
            self._server = await asyncio.start_server(self._connection, host, port)
        return self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        self._server.close()
        # Connections a client keeps alive are still being served: end them, or they die pending with the loop.
        open_connections = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in open_connections:
            task.cancel()
        await asyncio.gather(*open_connections, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    async def _upstream_client(self) -> httpx.AsyncClient:
        if self._client is None:
            base_url = self.upstream if isinstance(self.upstream, str) else await self.upstream()
            self._client = httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=FORWARD_TIMEOUT_S)
        return self._client

    def _task_index(self, request: Request) -> int | None:
        """The task index of the rollout a request belongs to, where it can tell."""
        _, path, headers, body = request
        session = headers.get(SESSION_HEADER)
        if b'"_ng_task_index"' in body:
            row = orjson.loads(body)
            if isinstance(row, dict) and type(row.get("_ng_task_index")) is int:
                if session:
                    self._sessions[session] = row["_ng_task_index"]
                return row["_ng_task_index"]
        if session in self._sessions:
            return self._sessions[session]
        if path.endswith(("/chat/completions", "/responses")) and (match := _QUESTION.search(body)):
            return int(match.group(1))
        return None

    def _draw(self, request: Request) -> str | None:
        self.requests += 1
        if self.plan:
            key = self._task_index(request)
            if key not in self.plan or key in self.injected_keys:
                return None
            fault = self.injected_keys[key] = self.plan[key]
        elif self._rng.random() < self.rate:
            fault = self._rng.choice(FAULTS)
        else:
            return None
        self.injected[fault] += 1
        return fault

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await _read_request(reader)) is not None:
                if not await self._answer(request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away mid-request
        finally:
            writer.close()

    def _control(self, request: Request) -> bytes | None:
        """The reply to a request for the proxy itself, or None for one to forward."""
        method, path, _, body = request
        if path == "/health":
            reply = b'{"status": "ok"}'
        elif path == "/_faults" and method == "POST":
            self.plan = {int(k): v for k, v in orjson.loads(body)["plan"].items()}
            self.injected_keys.clear()
            reply = b"{}"
        elif path == "/_faults":
            reply = orjson.dumps({"injected": {str(k): v for k, v in self.injected_keys.items()},
                                  "requests": self.requests}, option=orjson.OPT_NON_STR_KEYS)
        else:
            return None
        return _head(200, "application/json", len(reply)) + reply

    async def _answer(self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must not be reused."""
        if (control := self._control(request)) is not None:
            writer.write(control)
            await writer.drain()
            return True
        fault = self._draw(request)
        if fault == "reset":
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if fault == "hang":
            try:
                await asyncio.wait_for(reader.read(), self.hang_s)  # returns at the client's close
            except TimeoutError:
                pass
            return False
        if fault == "http_503":
            body = b'{"error": {"failure_class": "http_5xx", "message": "injected by fault_proxy"}}'
            writer.write(_head(503, "application/json", len(body)) + body)
            await writer.drain()
            return True
        if fault == "latency":
            await asyncio.sleep(self._rng.uniform(0.05, 0.3))
        method, path, headers, body = request
        client = await self._upstream_client()
        reply = await client.request(method, path, content=body,
                                     headers={k: v for k, v in headers.items() if k not in _HOP_HEADERS})
        head = _head(reply.status_code, reply.headers.get("content-type", "application/json"), len(reply.content))
        if fault == "truncate":
            writer.write(head + reply.content[: len(reply.content) // 2])
            await writer.drain()
            return False
        writer.write(head + reply.content)
        await writer.drain()
        return True


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    """(method, path, headers, body) of the next request on the connection, or None at its end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    request_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    method, path, _ = request_line.split(" ", 2)
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return method, path, headers, await _read_chunked(reader)
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, path, headers, body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body (as streamed uploads send), joined."""
    chunks = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
    await reader.readuntil(b"\r\n")  # the blank line after the last chunk (no trailers are sent here)
    return b"".join(chunks)
