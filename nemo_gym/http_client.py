"""The one HTTP client for every server-to-server call.

Pooled connections, a connect timeout and one deadline per request (sending its body and receiving the whole reply).
One attempt per request unless the caller asks for retries with a `RetryPolicy` (the client's or the call's): a rollout
has one retry budget, held by its outermost layer (docs/architecture.md, "Retry budget"), so nothing retries by
default. Retries, when asked for, back off exponentially with jitter and only follow failures that a retry can fix
(`nemo_gym.failures.is_retryable`: connection errors, timeouts, 5xx, 429). Whatever still fails raises
`RequestFailed` carrying a failure class, so callers record the failure instead of guessing at it.

External endpoints (a hosted API, a remote vLLM) go through the proxy HTTPS_PROXY / HTTP_PROXY name unless NO_PROXY
exempts them (nemo_gym.proxies, the one rule; loopback never), and their gzip answers are decoded. A proxy's refusal
is `http_4xx` with status 407, a proxy that is down or closes is `connect`; both messages name the proxy by host and
port and the endpoint, never the credentials. A reply whose body is longer than `max_reply_bytes` once decoded
(`http_wire.MAX_REPLY_BYTES` unless the client is built with another) is `invalid_response`, read no further and
never inflated whole. Failure messages name the URL without its credentials or query. This client does it rather
than httpx because httpx spends 34 to 50 times its CPU per request (benchmarks/results/external_http.json;
docs/architecture.md, "External endpoints").
"""

import asyncio
from typing import Any, AsyncIterable, Awaitable, Callable

import orjson

from nemo_gym.config.timeouts import CONNECT_TIMEOUT_S, READ_TIMEOUT_S
# The failure types are nemo_gym.failures'; callers of the client may take them from here.
from nemo_gym.failures import (  # noqa: F401
    NO_RETRY,
    FailureClass,
    RequestFailed,
    RetryPolicy,
    is_retryable,
)
from nemo_gym.http_wire import (
    MAX_REPLY_BYTES,
    BadReply,
    Body,
    ConnectFailed,
    ConnectionPool,
    ProxyRefused,
    ReplyTimeout,
    WireError,
)
from nemo_gym.model_calls import public_endpoint
from nemo_gym.sync_bridge import run_sync
from nemo_gym.traces import switch as traces

JSON_HEADERS = {"content-type": "application/json"}
# A server in this process that answers a request as its HTTP route would: (request body, headers) -> status, body.
InProcess = Callable[[bytes, dict[str, str]], Awaitable[tuple[int, bytes]]]
_BEARER = "Bearer "


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """The header that sends `api_key` as a bearer token (OpenAI's and vLLM's scheme); none without a key."""
    return {"authorization": f"{_BEARER}{api_key}"} if api_key else {}


def bearer_token(headers: dict[str, str]) -> str | None:
    """The key `headers` send as a bearer token, if any (to keep it out of what is quoted or logged)."""
    value = headers.get("authorization", "")
    if not value.startswith(_BEARER):
        return None
    return value.removeprefix(_BEARER).strip() or None
# Idle connections are dropped before uvicorn's default 5 s keep-alive (vLLM's) closes them under us.
KEEPALIVE_S = 4.0


def _error_body(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content[:500].decode(errors="replace")


def json_reply(status: int, raw: bytes, url: str, headers: dict[str, str] | None = None) -> Any:
    """The decoded JSON reply `raw` of status `status` from `url`; `RequestFailed` for an HTTP error (carrying the
    reply's Retry-After `headers`) or a body that is not JSON."""
    if status >= 400:
        kind = FailureClass.HTTP_5XX if status >= 500 else FailureClass.HTTP_4XX
        body = _error_body(raw)
        raise RequestFailed(kind, f"HTTP {status} from {url}: {str(body)[:300]}", url=url, status=status, body=body,
                            headers=headers or {})
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise RequestFailed(
            FailureClass.INVALID_RESPONSE, f"invalid JSON from {url} ({len(raw)} bytes)", url=url, status=status
        ) from None


def _transport_failure(exc: WireError, url: str) -> RequestFailed:
    """The failure class of a request that got no complete reply."""
    kind: FailureClass
    status = None
    if isinstance(exc, ProxyRefused):  # the proxy's own error status: 407 is the user's to fix, a 5xx may pass
        kind = FailureClass.HTTP_5XX if exc.status >= 500 else FailureClass.HTTP_4XX
        status = exc.status
    elif isinstance(exc, ConnectFailed):
        kind = FailureClass.CONNECT  # refused, reset, or closed before the reply: a retry may reach a healthy server
    elif isinstance(exc, BadReply):
        kind = FailureClass.INVALID_RESPONSE  # a truncated, undecodable or too long body, or malformed HTTP
    else:
        kind = FailureClass.TIMEOUT
    return RequestFailed(kind, f"{type(exc).__name__} calling {public_endpoint(url)}: {exc}", url=url, status=status)


class HttpClient:
    """An async JSON-over-HTTP client with one connection pool per process (nemo_gym.http_wire underneath).

    The pool binds to an event loop, so it is opened on first use inside the running loop, and opened again if a
    later run uses a new loop. The read timeout (or a call's `timeout_s`) bounds the whole request: a server that
    stops taking a streamed body fails it as surely as one that never replies. `retry` is NO_RETRY (one attempt)
    unless given. A reply body longer than `max_reply_bytes`, once decoded, fails the request (`invalid_response`).
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_connections: int = 4096,
        retry: RetryPolicy = NO_RETRY,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self.retry = retry
        self._max_reply_bytes = max_reply_bytes
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._max_connections = max_connections
        self._connections: ConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _pool(self) -> ConnectionPool:
        loop = asyncio.get_running_loop()
        if self._connections is None or self._loop is not loop:
            self._connections = ConnectionPool(limit=self._max_connections, keepalive_s=KEEPALIVE_S,
                                               connect_timeout_s=self._connect_timeout_s,
                                               max_reply_bytes=self._max_reply_bytes)
            self._loop = loop
        return self._connections

    async def aclose(self) -> None:
        # Let go of the pool before closing it: a request started meanwhile opens a new one, not this one.
        connections, self._connections = self._connections, None
        if connections is not None and self._loop is asyncio.get_running_loop():
            connections.close()

    async def request_raw(self, method: str, url: str, content: Body = None, *,
                          headers: dict[str, str] | None = None, timeout_s: float | None = None,
                          reply_headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One attempt: the status and raw body of the reply, whatever the status; `RequestFailed` when no complete
        reply came. The reply's Retry-After headers (http_wire.KEPT_HEADERS), if any, go to `reply_headers`.
        With traces on, a request made while a span is current carries its `traceparent`."""
        tracing = traces.ACTIVE
        if tracing is not None:  # the one check a request pays while traces are off
            headers = tracing.with_traceparent(headers)
        try:
            return await self._pool().request(method, url, headers, content, timeout_s or self._read_timeout_s,
                                              reply_headers)
        except WireError as exc:
            raise _transport_failure(exc, url) from None

    async def request_json(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
        in_process: InProcess | None = None,
    ) -> Any:
        """Send `body` as JSON and return the decoded JSON reply, retrying per `retry`. With `in_process`, the
        server at `url` runs in this process and answers through it, without HTTP: the same reply and failures."""
        content = orjson.dumps(body) if body is not None else None
        if in_process is not None:
            answer = in_process
            return await self._with_retries(retry, lambda: self._in_process(answer, url, content, headers, timeout_s))
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
        return await self.request_raw("POST", url, body, headers=JSON_HEADERS, timeout_s=timeout_s)

    async def _once(
        self, method: str, url: str, content: Body, headers: dict[str, str] | None, timeout_s: float | None
    ) -> Any:
        kept: dict[str, str] = {}
        status, raw = await self.request_raw(method, url, content, headers={**JSON_HEADERS, **headers} if headers
                                             else JSON_HEADERS, timeout_s=timeout_s, reply_headers=kept)
        return json_reply(status, raw, url, kept)

    async def _in_process(self, answer: InProcess, url: str, content: bytes | None, headers: dict[str, str] | None,
                          timeout_s: float | None) -> Any:
        deadline_s = timeout_s or self._read_timeout_s
        task = asyncio.current_task()
        assert task is not None, "an in-process call runs in a task, as every handler does"
        expiry = _Expiry(task)
        timer = asyncio.get_running_loop().call_later(deadline_s, expiry)
        try:
            status, raw = await answer(content or b"", headers or {})
        except asyncio.CancelledError:
            if expiry.fired and task.uncancel() <= expiry.cancelling:  # our deadline, not the caller's cancel
                raise _transport_failure(ReplyTimeout(f"no reply within {deadline_s:g} s"), url) from None
            raise
        finally:
            timer.cancel()
        return json_reply(status, raw, url)


class _Expiry:
    """Cancels `task` when called: an in-process call's deadline. A timer and this cost a third of what
    `asyncio.timeout` costs per call (5 calls a rollout); the outcome is the same, cancellation included."""

    __slots__ = ("task", "cancelling", "fired")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.cancelling = task.cancelling()  # cancellations the caller asked for before the call
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


async def _get_once(url: str, timeout_s: float) -> tuple[int, bytes]:
    client = HttpClient(connect_timeout_s=timeout_s, read_timeout_s=timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            return await client.request_raw("GET", url)
    except TimeoutError as exc:
        raise _transport_failure(ReplyTimeout(str(exc) or f"no reply within {timeout_s:g} s"), url) from None
    finally:
        await client.aclose()


def get_blocking(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET `url` from synchronous code (start-up polls, one-shot commands): its status and raw body, or
    `RequestFailed` when no reply came. It runs a loop of its own, in a worker thread when called inside one."""
    return run_sync(_get_once(url, timeout_s))


def get_json_blocking(url: str, timeout_s: float = 5.0) -> Any:
    """`get_blocking` for a JSON reply: the decoded body, or `RequestFailed` for an HTTP error or a body that is
    not JSON."""
    status, raw = get_blocking(url, timeout_s)
    return json_reply(status, raw, url)
