"""A fault-injecting HTTP/1.1 proxy for the reliability suite, run on its own event loop in a background thread.

Each request is forwarded to `upstream`, except that a seeded draw picks a `rate` share of requests for one of:
    latency   forward after a 50-300 ms pause
    http_503  answer 503 without forwarding
    reset     abort the connection with a TCP RST
    hang      never answer; hold the connection until the client gives up (or `hang_s` passes)
    truncate  forward, then send the full Content-Length header but only half the body, and close
`rate` may be changed while it runs (0 turns faults off); `injected` counts what was done.
"""

import asyncio
import random
import socket
import struct
import threading
from collections import Counter
from http import HTTPStatus

import httpx

FAULTS = ("latency", "http_503", "reset", "hang", "truncate")
_HOP_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding"}


def _head(status: int, content_type: str, length: int) -> bytes:
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {length}\r\n\r\n").encode()


class FaultProxy:
    def __init__(self, upstream: str, rate: float, seed: int, hang_s: float = 10.0) -> None:
        self.upstream = upstream
        self.rate = rate
        self.hang_s = hang_s
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault_proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._client: httpx.AsyncClient | None = None

    def start(self) -> int:
        """Listen on a free loopback port; returns the port."""
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=60)

    async def _listen(self) -> int:
        self._client = httpx.AsyncClient(base_url=self.upstream, trust_env=False, timeout=30)
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        self._server.close()
        await self._client.aclose()

    def _draw(self) -> str | None:
        self.requests += 1
        if self._rng.random() >= self.rate:
            return None
        fault = self._rng.choice(FAULTS)
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

    async def _answer(self, request: tuple[str, str, dict[str, str], bytes], reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must not be reused."""
        fault = self._draw()
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
        reply = await self._client.request(method, path, content=body,
                                           headers={k: v for k, v in headers.items() if k not in _HOP_HEADERS})
        head = _head(reply.status_code, reply.headers.get("content-type", "application/json"), len(reply.content))
        if fault == "truncate":
            writer.write(head + reply.content[: len(reply.content) // 2])
            await writer.drain()
            return False
        writer.write(head + reply.content)
        await writer.drain()
        return True


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """(method, path, headers, body) of the next request on the connection, or None at its end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    request_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    method, path, _ = request_line.split(" ", 2)
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, path, headers, body
