"""A model server's calls to its endpoint: a 429 is waited out (its Retry-After, read from the reply's headers by
the HTTP client) and sent again, a bounded number of times, then fails as rate_limited; every answered call has a
record (latency, wait, attempts, 429s, tokens); any other failure fails at once."""

import asyncio
import email.utils
import time

import orjson
import pytest

from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.model_calls import ModelCall, public_endpoint, usage_counts
from nemo_gym.responses_api_models.endpoint_calls import EndpointCalls, retry_after_s
from nemo_gym.responses_api_models.rate_limits import Budgets, EndpointLimiter
from nemo_gym.server.base import HandlerError
from tests.unit.test_http_wire import ScriptedServer, _reply, ok

COMPLETION = orjson.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"}}], "usage": {
    "prompt_tokens": 12, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 8},
    "completion_tokens_details": {"reasoning_tokens": 3}}})


def too_many(headers: bytes):  # type: ignore[no-untyped-def]
    async def answer(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(_reply(b'{"error": {"message": "Rate limit reached"}}', status="429 Too Many Requests",
                            extra=headers))
        await writer.drain()
        return True
    return answer


def _post(server_url: str, attempts: int = 5) -> tuple[object, ModelCall, float]:
    async def main() -> tuple[object, ModelCall, float]:
        calls = EndpointCalls(EndpointLimiter(Budgets()), max_rate_limited_attempts=attempts)
        http = HttpClient()
        started = time.monotonic()
        try:
            reply, call = await calls.post(http, server_url, {"model": "m", "max_tokens": 5},
                                           base_url="http://user:pw@127.0.0.1:1/v1?key=SECRET", model="m",
                                           headers={}, timeout_s=30)
        finally:
            await http.aclose()
        return reply, call, time.monotonic() - started

    return asyncio.run(main())


def test_a_429_is_waited_out_for_its_retry_after_and_sent_again() -> None:
    async def main() -> tuple[object, ModelCall, float, int]:
        async with ScriptedServer([too_many(b"retry-after: 1\r\nretry-after-ms: 300\r\n"), ok(COMPLETION)]) as s:
            reply, call, elapsed = await asyncio.to_thread(_post, s.url)
            return reply, call, elapsed, len(s.requests)

    reply, call, elapsed, requests = asyncio.run(main())
    assert requests == 2 and elapsed >= 0.3  # retry-after-ms, the finer of the two, was honoured
    assert (call.attempts, call.rate_limited, call.failure_class) == (2, 1, FailureClass.RATE_LIMITED)
    assert call.wait_s >= 0.3 and call.latency_s < elapsed
    assert (call.input_tokens, call.output_tokens, call.cached_tokens, call.reasoning_tokens) == (12, 5, 8, 3)
    assert call.endpoint == "http://127.0.0.1:1/v1"  # never the user, password or query
    assert isinstance(reply, dict) and reply["usage"]["prompt_tokens"] == 12


def test_a_call_still_refused_after_its_attempts_fails_as_rate_limited() -> None:
    async def main() -> tuple[HandlerError, int]:
        async with ScriptedServer([too_many(b"retry-after-ms: 10\r\n")]) as server:
            with pytest.raises(HandlerError) as failed:
                await asyncio.to_thread(_post, server.url, 3)
            return failed.value, len(server.requests)

    error, requests = asyncio.run(main())
    assert requests == 3 and error.status == 429 and error.failure_class == FailureClass.RATE_LIMITED
    assert "still answered 429 after 3 attempt(s)" in error.message and "SECRET" not in error.message


def test_any_other_failure_fails_at_once() -> None:
    async def main() -> tuple[RequestFailed, int]:
        async def unavailable(request: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(_reply(b'{"error": "down"}', status="503 Service Unavailable", extra=b"retry-after: 1\r\n"))
            await writer.drain()
            return True

        async with ScriptedServer([unavailable]) as server:
            with pytest.raises(RequestFailed) as failed:
                await asyncio.to_thread(_post, server.url)
            return failed.value, len(server.requests)

    error, requests = asyncio.run(main())
    assert requests == 1 and error.status == 503 and error.headers == {"retry-after": "1"}


@pytest.mark.parametrize("headers, expected", [
    ({"retry-after": "2"}, 2.0),
    ({"retry-after": "2", "retry-after-ms": "250"}, 0.25),
    ({"retry-after": "soon"}, None),
    ({}, None),
])
def test_retry_after_forms(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_s(RequestFailed("http_4xx", "429", status=429, headers=headers)) == expected


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    waited = retry_after_s(RequestFailed("http_4xx", "429", status=429, headers={"retry-after": when}))
    assert waited is not None and 25 <= waited <= 31


def test_usage_counts_in_both_apis_names() -> None:
    responses = {"input_tokens": 9, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 2},
                 "output_tokens_details": {"reasoning_tokens": 1}}
    assert usage_counts(responses) == {"input_tokens": 9, "output_tokens": 4, "cached_tokens": 2,
                                       "reasoning_tokens": 1}
    assert usage_counts({"prompt_tokens": 3, "completion_tokens": 2}) == {
        "input_tokens": 3, "output_tokens": 2, "cached_tokens": None, "reasoning_tokens": None}
    assert usage_counts(None)["input_tokens"] is None


def test_public_endpoint_drops_credentials_and_query() -> None:
    assert public_endpoint("https://me:pw@api.example.com:8443/v1/?api-key=SECRET") == "https://api.example.com:8443/v1"
    assert public_endpoint("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
