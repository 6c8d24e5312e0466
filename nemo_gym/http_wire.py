"""HTTP/1.1 on asyncio for nemo_gym.http_client: keep-alive connections pooled per origin, each request written in
one call, each reply parsed by httptools (the C parser uvicorn serves with).

Why not aiohttp's client: on loopback it spends 3.5 times the CPU per request of this module
(benchmarks/results/http_clients.json), and every rollout makes five such calls in the agent alone.
What this needs is small: JSON bodies (or a stream of chunks), a status and a body back (framed by Content-Length,
chunked, or the connection's end), timeouts, no redirects, no cookies. For endpoints outside this machine (a hosted
API, a remote vLLM): a forward proxy when the environment names one (nemo_gym.proxies decides which; https through a
CONNECT tunnel, http in absolute form), and gzip answers (asked for with Accept-Encoding, decoded here). Loopback
traffic never goes through a proxy and is never compressed.

Failures are typed by when they happened, which is what decides their failure class:
`ConnectFailed` (no connection, or it closed before the reply began), `ReplyTimeout` (the request was not sent, or its
reply did not complete, by its deadline), `BadReply` (malformed HTTP, or the connection closed partway through the
reply), `ProxyRefused` (the proxy answered CONNECT, or a request it should forward, with an error status of its
own). Messages name a proxy by host and port, never by its credentials. A header that would break the request's framing (CR, LF or NUL in its name or value) is refused before
anything is sent: `InvalidHeaderError`, which names the header and never shows its value (it may be a secret).
"""

import asyncio
import functools
import re
import ssl
import time
import zlib
from dataclasses import dataclass
from typing import AsyncIterable
from urllib.parse import urlsplit

import httptools

from nemo_gym.errors import NemoGymError
from nemo_gym.loopback import is_loopback
from nemo_gym.proxies import Proxy, proxy_for

# A request body: bytes, or a stream of chunks (sent with chunked transfer encoding).
Body = bytes | AsyncIterable[bytes] | None
# Reply headers a caller may ask for (`request(..., reply_headers=)`): how long a 429 or 503 asks to wait, and when
# the rate limits a 429 names are whole again.
KEPT_HEADERS = (b"retry-after", b"retry-after-ms", b"x-ratelimit-reset-requests", b"x-ratelimit-reset-tokens")
PROXY_AUTHENTICATION_REQUIRED = 407
# The most bytes a reply body may hold, once decoded: far above any real reply (a long completion with logprobs is a
# few MiB), far below what a broken or hostile endpoint could make this process hold (a gzip bomb inflates 1000-fold).
MAX_REPLY_BYTES = 256 * 1024 * 1024
_GZIP_ENCODINGS = (b"gzip", b"x-gzip", b"deflate")
_GZIP_OR_ZLIB = 47  # zlib's wbits for a gzip or a zlib header, whichever comes


class WireError(Exception):
    """A request that got no complete reply."""


class ConnectFailed(WireError):
    """No connection (refused, unreachable, not within the connect timeout), or it closed before the reply began."""


class ReplyTimeout(WireError, TimeoutError):
    """The request was not sent, or its reply did not complete, within the request's timeout."""


class BadReply(WireError):
    """The reply was not valid HTTP, or the connection closed partway through it."""


class ReplyTooLarge(BadReply):
    """The reply's body, once decoded, is longer than the limit: the connection is dropped, the rest never read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the reply body is longer than the limit of {limit} bytes ({limit / 2**20:g} MiB) once "
                         f"decoded; the rest was not read")
        self.limit = limit


class ProxyRefused(WireError):
    """The proxy answered with an error status of its own (407: its credentials are missing or wrong; 502 or 503:
    it could not reach the endpoint)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class InvalidHeaderError(NemoGymError, ValueError):
    """A header whose name or value holds CR, LF or NUL: sent, it would end the header early or smuggle another
    one in. Caused by the caller's input (say, an API key read with its trailing newline), so no retry can fix it."""


_BREAKS_FRAMING = re.compile(r"[\r\n\0]").search


def _header_line(name: str, value: str) -> bytes:
    """`name: value` as a header line; InvalidHeaderError (naming the header, never showing its value) when either
    holds CR, LF or NUL."""
    if _BREAKS_FRAMING(name):
        raise InvalidHeaderError(f"header name {name!r} contains CR, LF or NUL; nothing was sent")
    if _BREAKS_FRAMING(value):
        raise InvalidHeaderError(f"header {name!r}: its value contains CR, LF or NUL; nothing was sent")
    return b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1"))


class _Inflater:
    """A gzip (or zlib) body decoded as it arrives, its members one after another, never more than `limit` bytes of
    it: a body that inflates past the limit fails at that point, with no more than the limit inflated."""

    def __init__(self, encoding: bytes, limit: int) -> None:
        self._encoding = encoding.decode()
        self._limit = limit
        self._decoder = zlib.decompressobj(wbits=_GZIP_OR_ZLIB)
        self._midway = False  # a member has begun and not ended
        self._size = 0  # decoded so far

    def feed(self, data: bytes, out: list[bytes]) -> None:
        """Decode `data` onto `out`; BadReply when it does not decode, ReplyTooLarge past the limit."""
        try:
            while data:
                self._midway = True
                # One byte past what the limit leaves: enough to tell that the body goes past it.
                decoded = self._decoder.decompress(data, self._limit - self._size + 1)
                self._size += len(decoded)
                if self._size > self._limit:
                    raise ReplyTooLarge(self._limit)
                out.append(decoded)
                if self._decoder.eof:  # a gzip body may hold several members, one after another
                    data = self._decoder.unused_data
                    self._decoder, self._midway = zlib.decompressobj(wbits=_GZIP_OR_ZLIB), False
                else:
                    data = self._decoder.unconsumed_tail  # empty unless the output stopped at max_length
        except zlib.error as exc:
            raise self._undecodable(str(exc)) from None

    def finish(self) -> None:
        """BadReply when the body ended inside a member."""
        if self._midway:
            raise self._undecodable("it ends partway through")

    def _undecodable(self, why: str) -> BadReply:
        return BadReply(f"the {self._encoding} reply body does not decode: {why}")


@dataclass(frozen=True)
class _Route:
    """How requests to one origin go: direct or through `proxy`, with the request-target prefix (an http request
    through a proxy names the whole URL) and the header lines every request to the origin adds."""

    proxy: Proxy | None
    target_prefix: bytes
    extra_headers: bytes

    @staticmethod
    def of(origin: tuple[str, str, int], host_header: bytes) -> "_Route":
        scheme, host, port = origin
        if is_loopback(host):  # our own servers: no proxy, and compressing would only cost CPU
            return _Route(proxy=None, target_prefix=b"", extra_headers=b"")
        proxy = proxy_for(scheme, host, port)
        extra, prefix = b"accept-encoding: gzip\r\n", b""
        if proxy is not None and scheme == "http":
            prefix = b"http://" + host_header
            if proxy.authorization:
                extra += _header_line("proxy-authorization", proxy.authorization)
        return _Route(proxy=proxy, target_prefix=prefix, extra_headers=extra)


@functools.lru_cache(maxsize=4096)
def _split(url: str) -> tuple[tuple[str, str, int], bytes, bytes]:
    """(scheme, host, port), the request target and the Host header of `url`; the same few URLs are sent to over
    and over, so each is worked out once."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectFailed(f"not an http(s) URL: {url!r}")  # nothing to connect to, as aiohttp's client said
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    host = name if port == default else f"{name}:{port}"
    return (parts.scheme, parts.hostname, port), target.encode(), host.encode()


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time. The parser's callbacks (on_*) complete the reply, whose
    body, decoded as it arrives, may hold at most `max_reply_bytes`."""

    def __init__(self, max_reply_bytes: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._reply: asyncio.Future[tuple[int, bytes]] | None = None
        self._max_reply_bytes = max_reply_bytes
        self._body: list[bytes] = []
        self._size = 0  # of a body that is not encoded, so far
        self._inflater: _Inflater | None = None  # decodes (and counts) a gzip body
        self._reply_began = False
        self._headers_done = False
        self._framed = False  # the reply says where its body ends (Content-Length or chunked), not the connection's end
        self._encoding: bytes | None = None  # the reply's Content-Encoding
        self._kept: dict[str, str] | None = None  # where the current request wants KEPT_HEADERS
        self._writable: asyncio.Future[None] | None = None  # set while the transport's buffer is full
        self.closed = False
        self.reusable = False
        self.idle_since = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._headers_done and not self._framed and exc is None:  # a body that ends with the connection
            self.on_message_complete()
        elif self._reply_began:
            self._fail(BadReply("the connection closed partway through the reply"))
        else:
            self._fail(ConnectFailed(f"the server closed the connection before replying ({exc or 'EOF'})"))
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def data_received(self, data: bytes) -> None:
        if self._reply is None:  # bytes nobody asked for: the connection's state is unknown
            self.abort()
            return
        self._reply_began = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadReply(f"malformed HTTP reply: {exc}"))
            self.abort()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower in (b"content-length", b"transfer-encoding"):
            self._framed = True
        elif lower == b"content-encoding":
            self._encoding = value.strip().lower()
        elif self._kept is not None and lower in KEPT_HEADERS:
            self._kept[lower.decode()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._headers_done = True
        if self._encoding is not None and self._encoding in _GZIP_ENCODINGS:
            self._inflater = _Inflater(self._encoding, self._max_reply_bytes)

    def on_body(self, body: bytes) -> None:
        if self._reply is None:  # the reply failed already (too large, undecodable, timed out): the rest is dropped
            return
        try:
            if self._inflater is not None:
                self._inflater.feed(body, self._body)
                return
            self._size += len(body)
            if self._size > self._max_reply_bytes:
                raise ReplyTooLarge(self._max_reply_bytes)
            self._body.append(body)
        except BadReply as exc:
            self._fail(exc)
            self.abort()

    def on_message_complete(self) -> None:
        reply, self._reply = self._reply, None
        body, self._body, self._size = b"".join(self._body), [], 0
        encoding, self._encoding = self._encoding, None
        inflater, self._inflater = self._inflater, None
        self._reply_began = self._headers_done = self._framed = False
        self.reusable = self._parser.should_keep_alive() and not self.closed
        if reply is None or reply.done():
            return
        try:
            if inflater is not None:
                inflater.finish()
            elif body and encoding is not None and encoding != b"identity":
                raise BadReply(f"the reply has content-encoding {encoding.decode('latin-1')!r}, which was not "
                               f"asked for")
        except BadReply as exc:
            reply.set_exception(exc)
            return
        reply.set_result((self._parser.get_status_code(), body))

    # Requests
    def _fail(self, exc: WireError) -> None:
        reply, self._reply = self._reply, None
        if reply is not None and not reply.done():
            reply.set_exception(exc)

    def _timed_out(self, timeout_s: float) -> None:
        self._fail(ReplyTimeout(f"no complete reply within {timeout_s:g} s"))
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    async def exchange(self, head: bytes, body: Body, timeout_s: float,
                       kept: dict[str, str] | None = None) -> tuple[int, bytes]:
        """Send one request (`head` ends with the blank line) and return its status and body, all within
        `timeout_s`: a streamed body the server stops taking, or a source that stops giving, fails it too. The
        reply's KEPT_HEADERS go to `kept`."""
        if self.closed:  # closed by the server after it was picked (only a new one can be, before its first use)
            raise ConnectFailed("the server closed the connection before the request was sent")
        self._kept = kept
        reply: asyncio.Future[tuple[int, bytes]] = self._loop.create_future()
        self._reply = reply
        deadline = self._loop.time() + timeout_s
        if body is not None and not isinstance(body, (bytes, bytearray)):
            try:
                async with asyncio.timeout_at(deadline):
                    await self._send_stream(head, body, reply)
            except TimeoutError:
                self._reply = None  # nobody will await it: no exception may be left on it
                self.abort()
                raise ReplyTimeout(f"the request body was not sent within {timeout_s:g} s (the server stopped "
                                   f"reading it, or its source stopped giving)") from None
        timer = self._loop.call_at(deadline, self._timed_out, timeout_s)
        try:
            if body is None or isinstance(body, (bytes, bytearray)):
                self._write(head + body if body else head)  # buffered by the transport; the timer covers its sending
            return await reply
        finally:
            timer.cancel()

    def _write(self, *parts: bytes) -> None:
        assert self._transport is not None
        if len(parts) == 1:
            self._transport.write(parts[0])
        else:
            self._transport.writelines(parts)

    async def _send_stream(self, head: bytes, body: AsyncIterable[bytes], reply: asyncio.Future[tuple[int, bytes]]
                           ) -> None:
        """The head, then `body` with chunked framing, waiting whenever the transport's buffer is full."""
        self._write(head)
        async for chunk in body:
            if self.closed:
                break
            if chunk:
                self._write(b"%x\r\n" % len(chunk), chunk, b"\r\n")
            if self._writable is not None:
                await self._writable
        if reply.done():  # the server answered before the body's end: what it did with the rest is unknown
            self.reusable = False
        elif not self.closed:
            self._write(b"0\r\n\r\n")


class _TunnelOpening(asyncio.Protocol):
    """A connection to a proxy until the head of its answer to CONNECT has come."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._head = b""

    def data_received(self, data: bytes) -> None:
        self._head += data
        if b"\r\n\r\n" in self._head and not self.answer.done():
            self.answer.set_result(self._head)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_exception(ConnectFailed(str(exc or "EOF")))


def _refused(proxy: Proxy, what: str, status: int) -> ProxyRefused:
    why = (" Proxy Authentication Required: the credentials in the proxy URL are missing or wrong" if status == 407
           else "")
    return ProxyRefused(f"proxy {proxy.display} refused {what}: HTTP {status}{why}", status=status)


async def _tunnel(proxy: Proxy, host: str, port: int, tls: ssl.SSLContext, max_reply_bytes: int) -> _Connection:
    """A TLS connection to host:port through `proxy`: CONNECT, then TLS with the endpoint inside the tunnel."""
    loop = asyncio.get_running_loop()
    raw, opening = await loop.create_connection(_TunnelOpening, proxy.host, proxy.port)
    try:
        authority = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}").encode()
        auth = _header_line("proxy-authorization", proxy.authorization) if proxy.authorization else b""
        raw.write(b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (authority, authority, auth))
        try:
            answer = await opening.answer
        except ConnectFailed as exc:
            raise ConnectFailed(f"proxy {proxy.display} closed the connection before answering CONNECT "
                                f"{authority.decode()} ({exc})") from None
        status_line = answer.split(b"\r\n", 1)[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[1].isdigit():
            raise BadReply(f"proxy {proxy.display} answered CONNECT {authority.decode()} with malformed HTTP")
        if not 200 <= int(status_line[1]) < 300:
            raise _refused(proxy, f"CONNECT {authority.decode()}", int(status_line[1]))
        connection = _Connection(max_reply_bytes)
        transport = await loop.start_tls(raw, connection, tls, server_hostname=host)
    except BaseException:
        raw.abort()
        raise
    if transport is None:
        raise ConnectFailed(f"TLS to {host}:{port} through proxy {proxy.display} did not start")
    connection.connection_made(transport)  # start_tls hands the transport over without calling it
    return connection


class ConnectionPool:
    """Keep-alive connections per origin, at most `limit` open at once, each reused while it is idle for less than
    `keepalive_s` (below a server's own keep-alive, uvicorn's 5 s, so a server never closes one under a request).
    Bound to the event loop that first uses it. Each origin's route (direct or through a proxy) is worked out from
    the environment on its first request (nemo_gym.proxies), and kept for the pool's life. A reply whose body,
    decoded, is longer than `max_reply_bytes` fails with ReplyTooLarge."""

    def __init__(self, *, limit: int, keepalive_s: float, connect_timeout_s: float,
                 max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._max_reply_bytes = max_reply_bytes
        self._keepalive_s = keepalive_s
        self._connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._tls: ssl.SSLContext | None = None
        self._routes: dict[tuple[str, str, int], _Route] = {}

    async def request(self, method: str, url: str, headers: dict[str, str] | None, body: Body,
                      timeout_s: float, reply_headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """`method url` with `headers` and `body`; its status and body, or a WireError (ReplyTimeout when sending
        the request and receiving its reply took longer than `timeout_s`). The reply's KEPT_HEADERS, if any, go to
        `reply_headers`."""
        origin, target, host = _split(url)
        route = self._routes.get(origin)
        if route is None:
            route = self._routes[origin] = _Route.of(origin, host)
        lines = [b"%s %s%s HTTP/1.1\r\nhost: %s\r\n%s" % (method.encode(), route.target_prefix, target, host,
                                                           route.extra_headers)]
        lines.extend(_header_line(name, value) for name, value in (headers or {}).items())
        if body is None:
            lines.append(b"content-length: 0\r\n\r\n" if method in ("POST", "PUT", "PATCH") else b"\r\n")
        elif isinstance(body, (bytes, bytearray)):
            lines.append(b"content-length: %d\r\n\r\n" % len(body))
        else:
            lines.append(b"transfer-encoding: chunked\r\n\r\n")
        head = b"".join(lines)
        async with self._slots:
            connection = await self._connection(origin, route.proxy)
            try:
                status, reply = await connection.exchange(head, body, timeout_s, reply_headers)
            except WireError as exc:
                self._drop(connection)
                if route.proxy is None:
                    raise
                raise type(exc)(f"{exc}, through proxy {route.proxy.display}") from None
            except BaseException:  # a timeout, a failure, a cancelled caller: the connection's state is unknown
                self._drop(connection)
                raise
            if status == PROXY_AUTHENTICATION_REQUIRED and route.proxy is not None:
                self._drop(connection)
                raise _refused(route.proxy, f"the request to {host.decode()}", status)
            if connection.reusable and not connection.closed:
                connection.idle_since = time.monotonic()
                self._idle.setdefault(origin, []).append(connection)
            else:
                self._drop(connection)
            return status, reply

    def _drop(self, connection: _Connection) -> None:
        connection.abort()
        self._open.discard(connection)

    async def _connection(self, origin: tuple[str, str, int], proxy: Proxy | None) -> _Connection:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if not connection.closed and now - connection.idle_since < self._keepalive_s:
                return connection
            self._drop(connection)
        scheme, host, port = origin
        tls = None
        if scheme == "https":
            tls = self._tls = self._tls or ssl.create_default_context()
        where = f"{host}:{port}" if proxy is None else f"proxy {proxy.display} for {host}:{port}"
        loop = asyncio.get_running_loop()
        new_connection = functools.partial(_Connection, self._max_reply_bytes)
        try:
            async with asyncio.timeout(self._connect_timeout_s):  # the tunnel and both TLS handshakes included
                if proxy is None:
                    _, connection = await loop.create_connection(new_connection, host, port, ssl=tls,
                                                                 server_hostname=host if tls else None)
                elif tls is None:
                    _, connection = await loop.create_connection(new_connection, proxy.host, proxy.port)
                else:
                    connection = await _tunnel(proxy, host, port, tls, self._max_reply_bytes)
        except TimeoutError:
            raise ConnectFailed(f"no connection to {where} within {self._connect_timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {where}: {exc}") from None
        self._open.add(connection)
        return connection

    def close(self) -> None:
        """Close every connection; requests still running fail with ConnectFailed or BadReply."""
        for connection in self._open:
            connection.abort()
        self._open.clear()
        self._idle.clear()
