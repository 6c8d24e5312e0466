"""The one HTTP client for every server-to-server call.

Pooled connections, a connect and a read timeout on every request, and bounded retries with exponential backoff and
jitter for failures that a retry can fix (`nemo_gym.failures.is_retryable`: connection errors, timeouts, 5xx, 429).
Whatever still fails raises `RequestFailed` carrying a failure class, so callers record the failure instead of
guessing at it.
"""

import asyncio
import resource
from typing import Any, AsyncIterable, Awaitable, Callable

import aiohttp
import orjson

# The failure types are nemo_gym.failures'; callers of the client may take them from here.
from nemo_gym.failures import (  # noqa: F401
    FAILURE_CLASSES,
    NO_RETRY,
    FailureClass,
    RequestFailed,
    RetryPolicy,
    is_retryable,
)
from nemo_gym.sync_bridge import run_sync

# A request body: bytes, or a stream of chunks.
Body = bytes | AsyncIterable[bytes] | None


def _error_body(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content[:500].decode(errors="replace")


def _transport_failure(exc: BaseException, url: str) -> RequestFailed:
    """The failure class of an exception raised while sending a request or reading its reply."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        kind = "connect"  # no connection within connect_timeout_s: the server is not there, same as refused
    elif isinstance(exc, TimeoutError):  # read timeouts (aiohttp.SocketTimeoutError) are TimeoutErrors too
        kind = "timeout"
    elif isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        kind = "invalid_response"  # the server answered, but with a truncated body or malformed HTTP
    else:
        kind = "connect"  # refused, reset, or disconnected before the reply: a retry may reach a healthy server
    return RequestFailed(kind, f"{type(exc).__name__} calling {url}: {exc}", url=url)


def allow_open_files_up_to_hard_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit: at 1,024 rollouts in flight a server holds
    more sockets than the usual soft limit (1,024) allows, and would fail with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if resource.RLIM_INFINITY not in (soft, hard) and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class HttpClient:
    """An async JSON-over-HTTP client with one connection pool per process (aiohttp underneath).

    aiohttp rather than httpx: on loopback it sends 10-20x more requests per second per core, which is the
    ceiling of the whole stack (figures in notes/perf_readme.md). The session binds to an event loop, so it is
    opened on first use inside the running loop, and opened again if a later run uses a new loop.
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 600.0,
        max_connections: int = 4096,
        retry: RetryPolicy = RetryPolicy(),
    ) -> None:
        self.retry = retry
        self._connect_timeout_s = connect_timeout_s
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        allow_open_files_up_to_hard_limit()  # every process of the stack makes one, before it takes connections

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                # Idle connections are dropped before uvicorn's default 5 s keep-alive (vLLM's) closes them under us.
                keepalive_timeout=4.0,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                trust_env=False,  # loopback calls must never go through a proxy from the environment
                skip_auto_headers=("User-Agent",),
            )
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        # Let go of the session before closing it: a request started meanwhile opens a new one, not this one.
        session, self._session = self._session, None
        if session is not None and self._loop is asyncio.get_running_loop():
            await session.close()

    async def request_json(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Send `body` as JSON and return the decoded JSON reply, retrying per `retry`."""
        content = orjson.dumps(body) if body is not None else None
        return await self._with_retries(retry, lambda: self._once(method, url, content, headers, timeout_s))

    async def post_json_stream(
        self,
        url: str,
        body: Callable[[], bytes | AsyncIterable[bytes]],
        *,
        timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """POST `body()` and return the decoded JSON reply, retrying per `retry`. A streamed body cannot be sent
        twice, so `body` is called again for each attempt (e.g. a generator that makes a second pass over files)."""
        return await self._with_retries(retry, lambda: self._once("POST", url, body(), None, timeout_s))

    async def _with_retries(self, retry: RetryPolicy | None, attempt_once: Callable[[], Awaitable[Any]]) -> Any:
        policy = retry or self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                return await attempt_once()
            except RequestFailed as exc:
                exc.attempts = attempt
                if attempt >= policy.max_attempts or not is_retryable(exc):
                    raise
            await asyncio.sleep(policy.delay(attempt))

    async def post_json(self, url: str, body: Any, **kwargs: Any) -> Any:
        return await self.request_json("POST", url, body, **kwargs)

    async def get_json(self, url: str, **kwargs: Any) -> Any:
        return await self.request_json("GET", url, **kwargs)

    async def forward(self, url: str, body: AsyncIterable[bytes], *,
                      timeout_s: float | None = None) -> tuple[int, bytes]:
        """POST `body` as it arrives and return the status and raw reply, decoding neither: what a proxy needs when
        the body can be too large to hold as objects. A streamed body cannot be sent twice, so there is no retry."""
        try:
            async with self._client().post(url, data=body, headers={"content-type": "application/json"},
                                           timeout=self._timeout_for(timeout_s)) as response:
                return response.status, await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _transport_failure(exc, url) from None

    def _timeout_for(self, timeout_s: float | None) -> aiohttp.ClientTimeout:
        if not timeout_s:
            return self._timeout
        return aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s, sock_read=timeout_s)

    async def _once(
        self, method: str, url: str, content: Body, headers: dict[str, str] | None, timeout_s: float | None
    ) -> Any:
        all_headers = {"content-type": "application/json"}
        if headers:
            all_headers.update(headers)
        try:
            async with self._client().request(
                method, url, data=content, headers=all_headers, timeout=self._timeout_for(timeout_s)
            ) as response:
                status = response.status
                raw = await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _transport_failure(exc, url) from None
        if status >= 400:
            kind = "http_5xx" if status >= 500 else "http_4xx"
            body_out = _error_body(raw)
            raise RequestFailed(
                kind, f"HTTP {status} from {url}: {str(body_out)[:300]}", url=url, status=status, body=body_out
            )
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise RequestFailed(
                "invalid_response", f"invalid JSON from {url} ({len(raw)} bytes)", url=url, status=status
            ) from None


async def _get_once(url: str, timeout_s: float) -> tuple[int, bytes]:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
            async with session.get(url) as response:
                return response.status, await response.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise _transport_failure(exc, url) from None


def get_blocking(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET `url` from synchronous code (start-up polls, one-shot commands): its status and raw body, or
    `RequestFailed` when no reply came. It runs a loop of its own, in a worker thread when called inside one."""
    return run_sync(_get_once(url, timeout_s))


def get_json_blocking(url: str, timeout_s: float = 5.0) -> Any:
    """`get_blocking` for a JSON reply: the decoded body, or `RequestFailed` for an HTTP error or a body that is
    not JSON."""
    status, raw = get_blocking(url, timeout_s)
    if status >= 400:
        raise RequestFailed("http_5xx" if status >= 500 else "http_4xx", f"HTTP {status} from {url}", url=url,
                            status=status, body=_error_body(raw))
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise RequestFailed("invalid_response", f"invalid JSON from {url} ({len(raw)} bytes)", url=url,
                            status=status) from None
