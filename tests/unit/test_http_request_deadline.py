"""A streamed request body is bounded by the request's timeout: a loopback server that accepts the connection and
never reads it (its receive buffer made small, so the client's writes stall by construction), or a body source that
stops giving, fails `post_json_stream` and `forward` with a timeout instead of hanging them."""

import asyncio
import socket
import threading
from typing import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from nemo_gym.failures import RequestFailed
from nemo_gym.http_client import HttpClient

TIMEOUT_S = 0.5
CHUNK = b"x" * 65536
# Only if the deadline did not work: the call would otherwise hang the test run.
HANG_GUARD_S = 60.0


class NeverReads:
    """A loopback server that accepts connections and never reads from them, with a tiny receive buffer."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by accepted sockets
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/aggregate_metrics"
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        try:
            while True:
                connection, _ = self._listener.accept()
                self.accepted.append(connection)
        except OSError:  # the listener was closed
            return

    def __enter__(self) -> "NeverReads":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=10)
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def never_reads() -> Iterator[NeverReads]:
    with NeverReads() as server:
        yield server


async def endless() -> AsyncIterator[bytes]:
    """A body with no end: the server stops taking it long before."""
    while True:
        yield CHUNK


async def stops_giving() -> AsyncIterator[bytes]:
    """A body whose source gives one chunk and then nothing, ever."""
    yield CHUNK
    await asyncio.Event().wait()


Call = Callable[[HttpClient, str, Callable[[], AsyncIterator[bytes]]], Awaitable[object]]


async def _post_json_stream(http: HttpClient, url: str, body: Callable[[], AsyncIterator[bytes]]) -> object:
    return await http.post_json_stream(url, body, timeout_s=TIMEOUT_S)


async def _forward(http: HttpClient, url: str, body: Callable[[], AsyncIterator[bytes]]) -> object:
    return await http.forward(url, body(), timeout_s=TIMEOUT_S)


@pytest.mark.parametrize("call", [_post_json_stream, _forward], ids=["post_json_stream", "forward"])
@pytest.mark.parametrize("body", [endless, stops_giving], ids=["server_stops_reading", "source_stops_giving"])
def test_a_stalled_streamed_body_times_out(never_reads: NeverReads, call: Call,
                                           body: Callable[[], AsyncIterator[bytes]]) -> None:
    async def main() -> RequestFailed:
        http = HttpClient()
        try:
            with pytest.raises(RequestFailed) as caught:
                await asyncio.wait_for(call(http, never_reads.url, body), HANG_GUARD_S)
            return caught.value
        finally:
            await http.aclose()

    failure = asyncio.run(main())
    assert failure.failure_class == "timeout" and failure.attempts == 1
    assert f"the request body was not sent within {TIMEOUT_S:g} s" in failure.message
    assert len(never_reads.accepted) == 1  # it connected, sent into a server that never read, and gave up
