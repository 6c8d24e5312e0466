"""The one HTTP client for every server-to-server call.

Pooled connections, a connect and a read timeout on every request, and bounded retries with exponential backoff and
jitter for failures that a retry can fix (connection errors, timeouts, 5xx, 429). Whatever still fails raises
`RequestFailed` carrying a failure class, so callers record the failure instead of guessing at it.
"""

import asyncio
import random
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import orjson

FailureClass = Literal["connect", "timeout", "http_5xx", "http_4xx", "invalid_response", "agent_error"]
FAILURE_CLASSES: tuple[str, ...] = ("connect", "timeout", "http_5xx", "http_4xx", "invalid_response", "agent_error")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a request that failed for a retryable reason."""

    max_attempts: int = 3
    backoff_base_s: float = 0.2
    backoff_max_s: float = 5.0

    def delay(self, attempt: int) -> float:
        """Full-jitter exponential backoff: spreads retries of many concurrent requests apart."""
        return random.uniform(0, min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))


NO_RETRY = RetryPolicy(max_attempts=1)


class RequestFailed(Exception):
    """A request that failed after its last attempt."""

    def __init__(
        self,
        failure_class: str,
        message: str,
        *,
        url: str = "",
        status: int | None = None,
        attempts: int = 1,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.message = message
        self.url = url
        self.status = status
        self.attempts = attempts
        self.body = body

    def to_dict(self) -> dict[str, Any]:
        return {
            "failure_class": self.failure_class,
            "message": self.message,
            "status": self.status,
            "attempts": self.attempts,
        }


def _error_body(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return response.text[:500]


def _retryable(exc: RequestFailed) -> bool:
    if exc.failure_class in ("connect", "timeout", "http_5xx"):
        return True
    return exc.status == 429


class HttpClient:
    """An async JSON-over-HTTP client with one connection pool per process."""

    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 600.0,
        max_connections: int = 4096,
        retry: RetryPolicy = RetryPolicy(),
    ) -> None:
        self.retry = retry
        self._timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s, pool=None)
        self._client = httpx.AsyncClient(
            timeout=self._timeout,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            trust_env=False,  # loopback calls must never go through a proxy from the environment
        )

    async def aclose(self) -> None:
        await self._client.aclose()

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
        policy = retry or self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._once(method, url, body, headers, timeout_s)
            except RequestFailed as exc:
                exc.attempts = attempt
                if attempt >= policy.max_attempts or not _retryable(exc):
                    raise
            await asyncio.sleep(policy.delay(attempt))

    async def post_json(self, url: str, body: Any, **kwargs: Any) -> Any:
        return await self.request_json("POST", url, body, **kwargs)

    async def get_json(self, url: str, **kwargs: Any) -> Any:
        return await self.request_json("GET", url, **kwargs)

    async def _once(
        self, method: str, url: str, body: Any, headers: dict[str, str] | None, timeout_s: float | None
    ) -> Any:
        all_headers = {"content-type": "application/json"}
        if headers:
            all_headers.update(headers)
        content = orjson.dumps(body) if body is not None else None
        timeout = httpx.Timeout(timeout_s, connect=self._timeout.connect) if timeout_s else self._timeout
        try:
            response = await self._client.request(method, url, content=content, headers=all_headers, timeout=timeout)
        except httpx.TimeoutException as exc:
            kind = "connect" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
            raise RequestFailed(kind, f"{type(exc).__name__} calling {url}", url=url) from None
        except (httpx.TransportError, OSError) as exc:
            raise RequestFailed("connect", f"{type(exc).__name__} calling {url}: {exc}", url=url) from None
        if response.status_code >= 400:
            kind = "http_5xx" if response.status_code >= 500 else "http_4xx"
            body_out = _error_body(response)
            raise RequestFailed(
                kind,
                f"HTTP {response.status_code} from {url}: {str(body_out)[:300]}",
                url=url,
                status=response.status_code,
                body=body_out,
            )
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise RequestFailed(
                "invalid_response",
                f"invalid JSON from {url} ({len(response.content)} bytes)",
                url=url,
                status=response.status_code,
            ) from None
