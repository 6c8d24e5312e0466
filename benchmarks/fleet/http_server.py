"""A small HTTP/1.1 server on asyncio and httptools, so that one process can serve many simulated replicas, each
on a port of its own, for a small share of a core.

It serves keep-alive connections one request at a time (what our HTTP client sends: no pipelining), bodies by
Content-Length or chunked. A handler answers a status and a JSON body, or a `Reply` with headers of its own or cut
short (the head and half the body, then the connection closes). `kill` is a process dying: the port stops
listening and every open connection is reset, with or without a request in it; `start` listens again on the same
port.
"""

import asyncio
import socket
import struct
from dataclasses import dataclass
from http import HTTPStatus
from typing import Awaitable, Callable, cast

import httptools


@dataclass(frozen=True)
class Reply:
    status: int
    payload: bytes  # JSON, unless the handler means it not to be
    headers: tuple[tuple[str, str], ...] = ()
    cut: bool = False  # send the head and half the body, then close the connection


# (method, path, body) -> (status, JSON body) or a Reply
Handler = Callable[[str, str, bytes], Awaitable[tuple[int, bytes] | Reply]]


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
            self._write(Reply(400, b'{"error": "malformed HTTP request"}'), keep_alive=False)

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
            answer = await self.endpoint.handler(method, path, body)
        except asyncio.CancelledError:
            return  # the connection went away (or the replica died) first
        self.task = None
        self._write(answer if isinstance(answer, Reply) else Reply(*answer), keep_alive)

    def _write(self, reply: Reply, keep_alive: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        lines = [f"HTTP/1.1 {reply.status} {HTTPStatus(reply.status).phrase}", "content-type: application/json",
                 f"content-length: {len(reply.payload)}", *(f"{name}: {value}" for name, value in reply.headers),
                 *(() if keep_alive else ("connection: close",))]
        head = "".join(f"{line}\r\n" for line in lines).encode() + b"\r\n"
        self.transport.write(head + (reply.payload[:len(reply.payload) // 2] if reply.cut else reply.payload))
        if reply.cut or not keep_alive:
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
