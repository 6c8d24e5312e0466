"""nemo_gym.http_wire against a raw TCP server on loopback that answers each request as the test scripts it: reuse of
keep-alive connections, chunked bodies both ways, each way a reply can fail, with the failure class
nemo_gym.http_client gives it, and the limit on a reply's length (a gzip bomb included)."""

import asyncio
import ssl
import subprocess
import tracemalloc
import zlib
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.http_wire import (
    MAX_REPLY_BYTES,
    BadReply,
    ConnectFailed,
    ConnectionPool,
    ReplyTimeout,
    ReplyTooLarge,
)

Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]  # the request's bytes -> keep the connection?


def _reply(body: bytes, *, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
            % (status.encode(), len(body), extra, body))


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's head and body (content-length or chunked); None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode().lower().split("\r\n")
    length = next((int(line.split(":")[1]) for line in lines if line.startswith("content-length:")), 0)
    if "transfer-encoding: chunked" in lines:
        body = b""
        while size := int((await reader.readline()).strip(), 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readexactly(2)
        return head + body
    return head + await reader.readexactly(length)


class ScriptedServer:
    """Answers the n-th request with `answers[n]` (the last one again once they run out); counts connections."""

    def __init__(self, answers: list[Answer], tls: ssl.SSLContext | None = None) -> None:
        self.answers = answers
        self.tls = tls
        self.requests: list[bytes] = []
        self.connections = 0
        self.closed_by_client = asyncio.Event()
        self.url = ""

    async def __aenter__(self) -> "ScriptedServer":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/x?y=1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while (request := await _read_request(reader)) is not None:
                self.requests.append(request)
                answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
                if not await answer(request, writer):
                    writer.close()
                    return
        except asyncio.CancelledError:  # the test's loop ends with a request still unanswered (`never`)
            return
        self.closed_by_client.set()
        writer.close()


def ok(body: bytes = b'{"ok": true}', extra: bytes = b"") -> Answer:
    async def answer(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(_reply(body, extra=extra))
        await writer.drain()
        return b"connection: close" not in extra
    return answer


async def truncated(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(_reply(b'{"ok": true}')[:-5])
    await writer.drain()
    return False


async def reset(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.transport.abort()
    return False


async def malformed(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 two hundred OK\r\n\r\n")
    await writer.drain()
    return True


async def never(request: bytes, writer: asyncio.StreamWriter) -> bool:
    await asyncio.Event().wait()
    return False


async def chunked_reply(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\n\r\n")
    await writer.drain()
    return True


def pool(*, limit: int = 16, keepalive_s: float = 60.0, max_reply_bytes: int = MAX_REPLY_BYTES) -> ConnectionPool:
    return ConnectionPool(limit=limit, keepalive_s=keepalive_s, connect_timeout_s=5.0,
                          max_reply_bytes=max_reply_bytes)


def test_keep_alive_connection_is_reused_and_the_request_is_what_was_asked() -> None:
    async def main() -> None:
        async with ScriptedServer([ok()]) as server:
            connections = pool()
            for _ in range(3):
                assert await connections.request("POST", server.url, {"x-a": "1"}, b'{"q": 1}', 5.0) == \
                    (200, b'{"ok": true}')
            connections.close()
            assert server.connections == 1
            head, body = server.requests[0].split(b"\r\n\r\n")
            assert head.split(b"\r\n")[0] == b"POST /x?y=1 HTTP/1.1"
            assert b"x-a: 1" in head and b"content-length: 8" in head and body == b'{"q": 1}'
    asyncio.run(main())


def test_a_connection_the_server_closes_is_never_reused() -> None:
    async def main() -> None:
        async with ScriptedServer([ok(extra=b"connection: close\r\n"), ok()]) as server:
            connections = pool()
            assert (await connections.request("GET", server.url, None, None, 5.0))[0] == 200
            assert (await connections.request("GET", server.url, None, None, 5.0))[0] == 200
            connections.close()
            assert server.connections == 2
    asyncio.run(main())


def test_an_idle_connection_past_keepalive_is_replaced() -> None:
    async def main() -> None:
        async with ScriptedServer([ok()]) as server:
            connections = pool(keepalive_s=0.0)  # every idle connection is already too old
            for _ in range(2):
                assert (await connections.request("GET", server.url, None, None, 5.0))[0] == 200
            await asyncio.wait_for(server.closed_by_client.wait(), 30)  # the stale one was closed, not left open
            connections.close()
            assert server.connections == 2
    asyncio.run(main())


def test_chunked_request_and_chunked_reply() -> None:
    async def stream():
        for part in (b'{"rows":[', b"", b"1,2]}"):
            yield part

    async def main() -> None:
        async with ScriptedServer([chunked_reply]) as server:
            connections = pool()
            assert await connections.request("POST", server.url, None, stream(), 5.0) == (200, b'{"a": 1}')
            assert await connections.request("POST", server.url, None, b"{}", 5.0) == (200, b'{"a": 1}')
            connections.close()
            assert server.requests[0].endswith(b'\r\n\r\n{"rows":[1,2]}')
            assert server.connections == 1  # the chunked reply left the connection reusable
    asyncio.run(main())


async def until_close(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"ok\": true}")
    await writer.drain()
    return False


def test_a_body_without_length_ends_with_the_connection() -> None:
    async def main() -> None:
        async with ScriptedServer([until_close]) as server:
            connections = pool()
            for _ in range(2):  # never reused: the next request opens a new connection
                assert await connections.request("GET", server.url, None, None, 5.0) == (200, b'{"ok": true}')
            connections.close()
            assert server.connections == 2
    asyncio.run(main())


@pytest.mark.parametrize("answer, error, failure_class", [
    (reset, ConnectFailed, "connect"),
    (truncated, BadReply, "invalid_response"),
    (malformed, BadReply, "invalid_response"),
    (never, ReplyTimeout, "timeout"),
])
def test_each_failure_is_typed_and_the_connection_is_not_reused(answer: Answer, error: type,
                                                                failure_class: str) -> None:
    async def main() -> None:
        async with ScriptedServer([answer, ok()]) as server:
            connections = pool()
            with pytest.raises(error):
                await connections.request("POST", server.url, None, b"{}", 0.5)
            assert await connections.request("POST", server.url, None, b"{}", 5.0) == (200, b'{"ok": true}')
            connections.close()
            assert server.connections == 2
            client = HttpClient(read_timeout_s=0.5)
            server.requests.clear()
            with pytest.raises(RequestFailed) as failed:
                await client.post_json(server.url, {})
            await client.aclose()
            assert failed.value.failure_class == failure_class and failed.value.url == server.url
    asyncio.run(main())


def test_nothing_listening_is_a_connect_failure() -> None:
    async def main() -> None:
        async with ScriptedServer([ok()]) as server:
            url = server.url
        with pytest.raises(ConnectFailed):
            await pool().request("GET", url, None, None, 5.0)
    asyncio.run(main())


def test_a_url_that_is_not_http_is_a_connect_failure_naming_it() -> None:
    async def main() -> None:
        client = HttpClient()
        with pytest.raises(RequestFailed) as failed:
            await client.post_json("ftp://127.0.0.1:9/v1", {})
        await client.aclose()
        assert failed.value.failure_class == "connect" and "ftp://127.0.0.1:9/v1" in str(failed.value)
    asyncio.run(main())


def test_a_cancelled_request_closes_its_connection() -> None:
    async def main() -> None:
        async with ScriptedServer([never, ok()]) as server:
            connections = pool()
            request = asyncio.ensure_future(connections.request("POST", server.url, None, b"{}", 60.0))
            while not server.requests:  # the server has the request: cancel while it is being answered
                await asyncio.sleep(0.01)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            assert await connections.request("POST", server.url, None, b"{}", 5.0) == (200, b'{"ok": true}')
            connections.close()
            assert server.connections == 2
    asyncio.run(main())


def test_at_most_limit_connections_are_open() -> None:
    async def main() -> None:
        async with ScriptedServer([ok()]) as server:
            connections = pool(limit=3)
            replies = await asyncio.gather(*(connections.request("GET", server.url, None, None, 5.0)
                                             for _ in range(20)))
            connections.close()
            assert all(status == 200 for status, _ in replies)
            assert server.connections <= 3
    asyncio.run(main())


def test_https_to_a_server_whose_certificate_the_default_context_trusts(tmp_path: Path, monkeypatch) -> None:
    """A remote OpenAI-compatible API is https: the pool verifies the certificate against the default trust store
    (here one self-signed certificate for 127.0.0.1, through OpenSSL's SSL_CERT_FILE) and the host name."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)

    async def main(trusted: bool) -> None:
        async with ScriptedServer([ok()], tls=tls) as server:
            connections = pool()
            if trusted:
                assert await connections.request("POST", server.url, None, b"{}", 5.0) == (200, b'{"ok": true}')
                assert await connections.request("POST", server.url, None, b"{}", 5.0) == (200, b'{"ok": true}')
                assert server.connections == 1
            else:
                with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
                    await connections.request("POST", server.url, None, b"{}", 5.0)
            connections.close()

    asyncio.run(main(trusted=False))  # the system's trust store does not know this certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    asyncio.run(main(trusted=True))


LIMIT = 1 << 20  # the tests' reply limit: 1 MiB


def _gzip(size: int) -> bytes:
    """`size` zero bytes, gzip-encoded: 1 KiB per MiB, a bomb at any size."""
    encoder = zlib.compressobj(wbits=31)
    chunk = bytes(1 << 20)
    parts = [encoder.compress(chunk[:min(len(chunk), size - done)]) for done in range(0, size, len(chunk))]
    return b"".join(parts) + encoder.flush()


def sends(body: bytes, encoding: bytes = b"") -> Answer:
    """Answers with `body` (framed by content-length, labelled `encoding`), however much of it the client takes."""
    extra = b"content-encoding: %s\r\n" % encoding if encoding else b""

    async def answer(request: bytes, writer: asyncio.StreamWriter) -> bool:
        try:
            writer.write(_reply(body, extra=extra))
            await writer.drain()
        except ConnectionError:  # the client stopped reading and closed: what a too long reply is for
            return False
        return True
    return answer


@pytest.mark.parametrize("body, encoding", [(b"x" * LIMIT, b""), (_gzip(LIMIT), b"gzip")], ids=["plain", "gzip"])
def test_a_reply_of_the_limit_is_whole(body: bytes, encoding: bytes) -> None:
    async def main() -> None:
        async with ScriptedServer([sends(body, encoding)]) as server:
            connections = pool(max_reply_bytes=LIMIT)
            status, reply = await connections.request("GET", server.url, None, None, 10.0)
            connections.close()
            assert status == 200 and len(reply) == LIMIT
    asyncio.run(main())


@pytest.mark.parametrize("body, encoding", [
    (b"x" * (LIMIT + 1), b""),
    (_gzip(LIMIT + 1), b"gzip"),
    (_gzip(64 * LIMIT), b"gzip"),  # 64 KiB on the wire, 64 MiB inflated
], ids=["plain", "gzip", "gzip_bomb"])
def test_a_reply_longer_than_the_limit_fails_in_bounded_memory(body: bytes, encoding: bytes) -> None:
    """The body is read (and inflated) only up to the limit: the request fails as an invalid response naming the
    URL, without its query, and the limit, and the memory taken stays a small multiple of the limit."""
    async def main() -> tuple[int, RequestFailed]:
        async with ScriptedServer([sends(body, encoding), ok()]) as server:
            connections = pool(max_reply_bytes=LIMIT)
            tracemalloc.start()
            try:
                with pytest.raises(ReplyTooLarge, match=f"limit of {LIMIT} bytes"):
                    await connections.request("GET", server.url, None, None, 10.0)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            # The connection was dropped, the pool goes on with a new one.
            assert await connections.request("GET", server.url, None, None, 10.0) == (200, b'{"ok": true}')
            connections.close()
            assert server.connections == 2
            client = HttpClient(max_reply_bytes=LIMIT)
            server.answers, server.requests = [sends(body, encoding)], []
            with pytest.raises(RequestFailed) as failed:
                await client.get_json(f"{server.url}&api_key=SECRET")
            await client.aclose()
            return peak, failed.value

    peak, error = asyncio.run(main())
    assert peak < 4 * LIMIT, f"{peak} bytes allocated at the peak for a {LIMIT}-byte limit"
    assert error.failure_class == FailureClass.INVALID_RESPONSE
    message = str(error)
    assert "ReplyTooLarge calling http://127.0.0.1:" in message and f"/x: the reply body is longer than the limit " \
        f"of {LIMIT} bytes (1 MiB)" in message and "SECRET" not in message
