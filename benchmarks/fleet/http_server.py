"""A small HTTP/1.1 server on asyncio and httptools, so that one process can serve many simulated replicas, each
on a port of its own, for a small share of a core.

It serves keep-alive connections one request at a time (what our HTTP client sends: no pipelining), bodies by
Content-Length or chunked. `kill` is a process dying: the port stops listening and every open connection is
reset, with or without a request in it; `start` listens again on the same port.
"""

import asyncio
import socket
import struct
from http import HTTPStatus
from typing import Awaitable, Callable, cast

import httptools

Handler = Callable[[str, str, bytes], Awaitable[tuple[int, bytes]]]  # (method, path, body) -> (status, JSON body)


class _Connection(asyncio.Protocol):
    def __init__(self, endpoint: "HttpEndpoint") -> None:
        self.endpoint = endpoint
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.task: asyncio.Task[None] | None = None

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes
        self.endpoint.connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(400, b'{"error": "malformed HTTP request"}', keep_alive=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.endpoint.connections.discard(self)
        if self.task is not None:
            self.task.cancel()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url, self.body = b"", []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method().decode()
        path = httptools.parse_url(self.url).path.decode()
        self.task = asyncio.get_running_loop().create_task(
            self._respond(method, path, b"".join(self.body), self.parser.should_keep_alive()))

    async def _respond(self, method: str, path: str, body: bytes, keep_alive: bool) -> None:
        try:
            status, payload = await self.endpoint.handler(method, path, body)
        except asyncio.CancelledError:
            return  # the connection went away (or the replica died) first
        self.task = None
        self._write(status, payload, keep_alive)

    def _write(self, status: int, payload: bytes, keep_alive: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(payload)}\r\n{'' if keep_alive else 'connection: close' + chr(13) + chr(10)}"
                f"\r\n").encode()
        self.transport.write(head + payload)
        if not keep_alive:
            self.transport.close()

    def reset(self) -> None:
        """Close at once with a TCP reset, as the kernel does for a process that died with data unread."""
        if self.transport is None:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()


class HttpEndpoint:
    """`handler` served on `host`:`port` (0: a free port, kept across kill and start)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(self), self.host, self.port, reuse_address=True, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]

    def kill(self) -> None:
        """Stop listening and reset every connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for connection in list(self.connections):
            connection.reset()
