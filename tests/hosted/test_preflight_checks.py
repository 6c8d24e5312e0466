"""The endpoint check itself: bounded by its timeout (an endpoint that takes the connection and never answers),
the key kept out of what it reports, and against a real vLLM the served model and its context length."""

import asyncio
import time

import pytest

from nemo_gym.http_client import HttpClient
from nemo_gym.responses_api_models.preflight import (
    KEY_REJECTED,
    MODEL_NOT_SERVED,
    UNREACHABLE,
    EndpointCheck,
    check_endpoint,
)
from tests.helpers.model import VLLMServer
from tests.unit.test_http_wire import ScriptedServer, _reply


def _check(url: str, model: str, key: str | None = None, timeout_s: float = 5.0) -> tuple[EndpointCheck, float]:
    async def main() -> tuple[EndpointCheck, float]:
        http = HttpClient()
        started = time.monotonic()
        try:
            return await check_endpoint(http, "policy_model", url, key, model, timeout_s), time.monotonic() - started
        finally:
            await http.aclose()

    return asyncio.run(main())


def test_an_endpoint_that_never_answers_is_unreachable_within_the_timeout() -> None:
    async def never(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(3600)
        return False

    async def main() -> tuple[EndpointCheck, float]:
        async with ScriptedServer([never]) as server:
            return await asyncio.to_thread(_check, server.url.split("/x")[0] + "/v1", "m", None, 0.5)

    check, elapsed = asyncio.run(main())
    assert check.problem == UNREACHABLE and "0.5 s" in check.detail
    assert elapsed < 5  # bounded by the check's own timeout, not by the endpoint


def test_a_rejected_key_is_never_shown_even_when_the_endpoint_echoes_it() -> None:
    secret = "sk-secret-0123456789"

    async def echo(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(_reply(f'{{"error": "Incorrect API key provided: {secret}"}}'.encode(), status="401 Unauthorized"))
        await writer.drain()
        return True

    async def main() -> EndpointCheck:
        async with ScriptedServer([echo]) as server:
            check, _ = await asyncio.to_thread(_check, server.url.split("/x")[0] + "/v1", "m", secret)
            return check

    check = asyncio.run(main())
    assert check.problem == KEY_REJECTED and secret not in check.line() and "***" in check.line()


def test_an_endpoint_without_a_model_list_is_reachable_and_says_what_went_unchecked() -> None:
    async def not_found(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(_reply(b'{"detail": "Not Found"}', status="404 Not Found"))
        await writer.drain()
        return True

    async def main() -> EndpointCheck:
        async with ScriptedServer([not_found]) as server:
            check, _ = await asyncio.to_thread(_check, server.url.split("/x")[0] + "/v1", "m")
            return check

    check = asyncio.run(main())
    assert check.problem is None and "key and model unchecked (GET /models answered HTTP 404" in check.line()


@pytest.mark.vllm
def test_a_real_vllm_reports_its_model_and_context_length(vllm_server: VLLMServer) -> None:
    served, _ = _check(vllm_server.base_url, vllm_server.model)
    assert served.problem is None and served.context_length == 2048
    assert served.line().endswith(f"serves '{vllm_server.model}', context 2048 tokens "
                                  f"(checked in {served.seconds:.2f} s)")
    wrong, _ = _check(vllm_server.base_url, "SmolLM2")
    assert wrong.problem == MODEL_NOT_SERVED and wrong.served == [vllm_server.model]
