"""A model server's calls to its endpoint: a 429 is waited out (its Retry-After, read from the reply's headers by
the HTTP client) and sent again, a bounded number of times, then fails as rate_limited; every answered call has a
record (latency, wait, attempts, 429s, tokens); any other failure fails at once. A 429 asking for a longer wait than
max_rate_limit_wait_s is not waited out: the call fails at once carrying the endpoint's refusal, pausing nobody. A
request whose turn would come after its deadline fails before it is sent. Every 429 is counted as it comes."""

import asyncio
import email.utils
import time

import orjson
import pytest

from nemo_gym.failures import REFUSAL_FIELD, EndpointRefusal, FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient
from nemo_gym.model_calls import ModelCall, public_endpoint, usage_counts
from nemo_gym.responses_api_models.endpoint_calls import (
    EndpointCalls,
    endpoint_said,
    requested_wait_s,
    retry_after_s,
)
from nemo_gym.responses_api_models.rate_limits import Budgets, EndpointLimiter
from nemo_gym.server.base import HandlerError
from tests.unit.test_http_wire import ScriptedServer, _reply, ok

COMPLETION = orjson.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"}}], "usage": {
    "prompt_tokens": 12, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 8},
    "completion_tokens_details": {"reasoning_tokens": 3}}})


QUOTA = orjson.dumps({"error": {"message": "You exceeded your current quota, please check your plan.",
                                  "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}})
KEY = "sk-the-real-key"


RATE_LIMIT = b'{"error": {"message": "Rate limit reached"}}'


def too_many(headers: bytes, body: bytes = RATE_LIMIT):  # type: ignore[no-untyped-def]
    async def answer(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(_reply(body, status="429 Too Many Requests", extra=headers))
        await writer.drain()
        return True
    return answer


def _calls(attempts: int = 5, max_wait_s: float = 120, limiter: EndpointLimiter | None = None) -> EndpointCalls:
    return EndpointCalls(limiter or EndpointLimiter(Budgets()), max_rate_limited_attempts=attempts,
                         max_rate_limit_wait_s=max_wait_s)


async def _post_with(calls: EndpointCalls, server_url: str, timeout_s: float = 30) -> tuple[object, ModelCall]:
    http = HttpClient()
    try:
        return await calls.post(http, server_url, {"model": "m", "max_tokens": 5},
                                base_url="http://user:pw@127.0.0.1:1/v1?key=SECRET", model="m",
                                headers={"authorization": f"Bearer {KEY}"}, timeout_s=timeout_s)
    finally:
        await http.aclose()


def _post(server_url: str, attempts: int = 5) -> tuple[object, ModelCall, float]:
    async def main() -> tuple[object, ModelCall, float]:
        started = time.monotonic()
        reply, call = await _post_with(_calls(attempts), server_url)
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
    assert error.message.endswith(": 429: Rate limit reached")  # what the endpoint said


@pytest.mark.parametrize("headers", [b"retry-after: 3600\r\n", b"x-ratelimit-reset-requests: 1h0m0s\r\n"])
def test_a_wait_beyond_the_cap_is_not_taken_and_the_call_carries_the_endpoints_refusal(headers: bytes) -> None:
    """A spent quota: 429 insufficient_quota, wait an hour. The call fails at once (one request, not five an hour
    apart), nobody is paused, and the failure quotes the endpoint (never its key, user, password or query)."""
    async def main() -> tuple[HandlerError, int, EndpointLimiter]:
        calls = _calls(max_wait_s=5)
        body = QUOTA.replace(b"your plan", b"your plan for " + KEY.encode())  # an endpoint that echoes the key
        async with ScriptedServer([too_many(headers, body)]) as server:
            with pytest.raises(HandlerError) as failed:
                await _post_with(calls, server.url)
            return failed.value, len(server.requests), calls.limiter

    error, requests, limiter = asyncio.run(main())
    assert requests == 1 and error.status == 429 and error.failure_class == FailureClass.RATE_LIMITED
    refusal = EndpointRefusal.from_dict(error.extra[REFUSAL_FIELD])
    assert refusal == EndpointRefusal("http://127.0.0.1:1/v1", 429, "insufficient_quota",
                                      "You exceeded your current quota, please check your plan for ***.", 3600.0, 5.0)
    assert error.message == refusal.line()
    assert "429 insufficient_quota: You exceeded your current quota" in error.message
    assert "the endpoint asks to wait 3600 s" in error.message and "max_rate_limit_wait_s=5" in error.message
    assert KEY not in error.message and "SECRET" not in error.message and "pw" not in error.message
    assert limiter._state.read().paused_until == 0.0 and limiter.learned_requests_per_minute() is None
    assert limiter.rate_limited_count() == 1


def test_a_request_whose_turn_comes_after_its_deadline_fails_without_being_sent() -> None:
    """Another worker's 429 paused every sender for 3 s; a call with a 1 s timeout is not sent at the pause's end
    with a millisecond left (sent, billed, timed out): it fails as rate_limited and the endpoint sees nothing."""
    async def main() -> tuple[HandlerError, int, float]:
        calls = _calls()
        calls.limiter.limited(retry_after_s=3.0)
        async with ScriptedServer([ok(COMPLETION)]) as server:
            started = time.monotonic()
            with pytest.raises(HandlerError) as failed:
                await _post_with(calls, server.url, timeout_s=1.0)
            return failed.value, len(server.requests), time.monotonic() - started

    error, requests, elapsed = asyncio.run(main())
    assert requests == 0
    assert error.status == 429 and error.failure_class == FailureClass.RATE_LIMITED
    assert "not sent; its turn under the rate limits comes in" in error.message
    assert elapsed < 3.0  # failed when it knew, not when the pause ended


def test_a_429_is_counted_when_it_comes_while_its_call_still_waits() -> None:
    """The collector reads the count (GET /rate_limited) for its progress line while calls wait their 429s out."""
    async def main() -> tuple[bool, dict[str, int]]:
        calls = _calls()
        async with ScriptedServer([too_many(b"retry-after: 30\r\n"), ok(COMPLETION)]) as server:
            call = asyncio.create_task(_post_with(calls, server.url, timeout_s=60))
            async with asyncio.timeout(10):  # the 429 comes at once; a count kept as calls end would wait 30 s
                while calls.limiter.rate_limited_count() == 0:
                    await asyncio.sleep(0.01)
            waiting = not call.done()
            answer = await calls._rate_limited(None, None)  # type: ignore[arg-type]
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        return waiting, answer

    waiting, answer = asyncio.run(main())
    assert waiting and answer == {"rate_limited": 1}


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


@pytest.mark.parametrize("headers, expected", [
    ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
    ({"x-ratelimit-reset-requests": "1h2m3.5s", "x-ratelimit-reset-tokens": "20ms"}, 3723.5),
    ({"x-ratelimit-reset-tokens": "30"}, 30.0),
    ({"x-ratelimit-reset-requests": "6 minutes"}, None),
    ({"x-ratelimit-reset-requests": "1h", "retry-after": "2"}, 2.0),  # the Retry-After says when one more fits
])
def test_a_wait_from_the_rate_limit_reset_headers(headers: dict[str, str], expected: float | None) -> None:
    assert requested_wait_s(RequestFailed("http_4xx", "429", status=429, headers=headers)) == expected


@pytest.mark.parametrize("body, said", [
    ({"error": {"message": "Quota", "type": "insufficient_quota", "code": None}}, ("insufficient_quota", "Quota")),
    ({"error": {"code": 429, "message": "Spent", "status": "RESOURCE_EXHAUSTED"}}, ("RESOURCE_EXHAUSTED", "Spent")),
    ({"type": "error", "error": {"type": "rate_limit_error", "message": "Slow\ndown"}}, ("rate_limit_error",
                                                                                        "Slow down")),
    ("<html>Too Many Requests</html>", ("", "<html>Too Many Requests</html>")),
])
def test_what_an_endpoint_said_in_the_forms_providers_use(body: object, said: tuple[str, str]) -> None:
    assert endpoint_said(body) == said


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
