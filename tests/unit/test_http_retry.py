"""The one retry rule (nemo_gym.failures) and the client's retrying POST of a streamed body, against a real server on
loopback that fails on purpose."""

import asyncio
from typing import AsyncIterator

import orjson
import pytest
from aiohttp import web

from nemo_gym.errors import DownstreamError, NemoGymError
from nemo_gym.failures import RequestFailed, RetryPolicy, failure_class_of, is_retryable
from nemo_gym.http_client import HttpClient

FAST = RetryPolicy(max_attempts=3, backoff_base_s=0.01)


async def _serve(answers: list[tuple[int, dict]], bodies: list[bytes]) -> tuple[web.AppRunner, str]:
    """A server answering each POST with the next (status, JSON) of `answers` and recording the bodies it got."""

    async def handle(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        status, payload = answers.pop(0)
        return web.json_response(payload, status=status)

    app = web.Application()
    app.router.add_post("/x", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}/x"


def _chunks() -> AsyncIterator[bytes]:
    async def gen() -> AsyncIterator[bytes]:
        for part in (b'{"rows":[', b"1,2,", b"3]}"):
            yield part

    return gen()


def test_streamed_body_is_produced_again_for_each_attempt() -> None:
    async def main() -> tuple[object, list[bytes]]:
        bodies: list[bytes] = []
        runner, url = await _serve([(503, {}), (502, {}), (200, {"ok": True})], bodies)
        http = HttpClient()
        try:
            return await http.post_json_stream(url, _chunks, retry=FAST), bodies
        finally:
            await http.aclose()
            await runner.cleanup()

    answer, bodies = asyncio.run(main())
    assert answer == {"ok": True}
    assert bodies == [b'{"rows":[1,2,3]}'] * 3


def test_the_client_makes_one_attempt_unless_asked() -> None:
    """One retry budget per rollout, held by its outermost layer (docs/architecture.md): a client that retried on
    its own would multiply it, so only an explicit policy retries."""

    async def main() -> tuple[RequestFailed, int, object]:
        bodies: list[bytes] = []
        runner, url = await _serve([(503, {}), (200, {"ok": True}), (503, {}), (200, {"ok": True})], bodies)
        http, retrying = HttpClient(), HttpClient(retry=FAST)
        try:
            with pytest.raises(RequestFailed) as info:
                await http.post_json(url, {"a": 1})
            requests = len(bodies)
            return info.value, requests, await retrying.post_json(url, {"a": 1})
        finally:
            await http.aclose()
            await retrying.aclose()
            await runner.cleanup()

    error, requests, retried = asyncio.run(main())
    assert (requests, error.attempts, error.status) == (1, 1, 503)
    assert retried == {"ok": True}  # asked for, retries still happen: 503 then 200


def test_streamed_post_gives_up_with_the_failure_class() -> None:
    async def main() -> RequestFailed:
        runner, url = await _serve([(503, {})] * 3, [])
        http = HttpClient()
        try:
            with pytest.raises(RequestFailed) as info:
                await http.post_json_stream(url, _chunks, retry=FAST)
            return info.value
        finally:
            await http.aclose()
            await runner.cleanup()

    error = asyncio.run(main())
    assert error.failure_class == "http_5xx" and error.attempts == 3 and error.status == 503
    assert isinstance(error, DownstreamError) and not isinstance(error, NemoGymError)  # CLI exit 1, not 2


def test_a_downstream_4xx_relayed_as_502_is_not_retried() -> None:
    async def main() -> tuple[RequestFailed, int]:
        bodies: list[bytes] = []
        relayed = {"error": {"failure_class": "http_4xx", "message": "bad request downstream"}}
        runner, url = await _serve([(502, relayed), (200, {})], bodies)
        http = HttpClient(retry=FAST)
        try:
            with pytest.raises(RequestFailed) as info:
                await http.post_json(url, {"a": 1})
            return info.value, len(bodies)
        finally:
            await http.aclose()
            await runner.cleanup()

    error, requests = asyncio.run(main())
    assert requests == 1 and failure_class_of(error) == "http_4xx" and not is_retryable(error)


@pytest.mark.parametrize(("failure_class", "status", "retryable"), [
    ("connect", None, True), ("timeout", None, True), ("http_5xx", 503, True), ("http_4xx", 429, True),
    ("http_4xx", 400, False), ("invalid_response", 200, False),
])
def test_retry_rule(failure_class: str, status: int | None, retryable: bool) -> None:
    assert is_retryable(RequestFailed(failure_class, "x", status=status)) is retryable


def test_agent_error_relayed_keeps_its_class() -> None:
    body = orjson.loads(b'{"error": {"failure_class": "agent_error", "message": "boom"}}')
    error = RequestFailed("http_5xx", "x", status=500, body=body)
    assert failure_class_of(error) == "agent_error" and is_retryable(error)
