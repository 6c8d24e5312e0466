"""Each fault kind of the simulated fleet, set through its control endpoint, as a client of one replica sees it: the
generation request fails the fault's way while `GET /v1/models` still answers, and `none` makes it healthy again."""

import asyncio
from typing import Any, Awaitable

import orjson
import pytest

from benchmarks.fleet.fleet import QUOTA_RETRY_AFTER_S, SLOW_FACTOR, SimFleet
from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient
from tests.fleet.sim_replicas import MODEL, on_two_replicas

BODY = {"model": MODEL, "messages": [{"role": "user", "content": "What's the weather in Lima?"}], "max_tokens": 50}


async def _fault(fleet: SimFleet, http: HttpClient, fault: str, replica: int = 0, after: int = 0) -> Any:
    return await http.post_json(f"{fleet.control_url}/fleet/fault", {"replica": replica, "fault": fault,
                                                                     "after": after})


async def _chat(fleet: SimFleet, http: HttpClient, replica: int = 0, timeout_s: float | None = None) -> Any:
    return await http.post_json(f"{fleet.base_urls[replica]}/chat/completions", BODY, timeout_s=timeout_s)


async def _failure(call: Awaitable[Any]) -> RequestFailed:
    with pytest.raises(RequestFailed) as failed:
        await call
    return failed.value


async def _stats(fleet: SimFleet, http: HttpClient) -> list[dict[str, Any]]:
    return list((await http.get_json(f"{fleet.control_url}/fleet/stats"))["replicas"])


async def _healthy_again(fleet: SimFleet, http: HttpClient) -> str:
    await _fault(fleet, http, "none")
    return str((await _chat(fleet, http))["choices"][0]["message"]["role"])


def test_http_5xx_answers_502_to_generation_while_the_models_listing_answers() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> tuple[RequestFailed, Any, Any, str]:
        await _fault(fleet, http, "http_5xx")
        failed = await _failure(_chat(fleet, http))
        models = await http.get_json(f"{fleet.base_urls[0]}/models")
        return failed, models, (await _stats(fleet, http))[0], await _healthy_again(fleet, http)

    failed, models, stats, again = on_two_replicas(scenario)
    assert (failed.status, failed.failure_class) == (502, FailureClass.HTTP_5XX)
    assert models["data"][0]["id"] == MODEL
    assert (stats["fault"], stats["requests"], stats["faulted"], stats["finished"]) == ("http_5xx", 1, 1, 0)
    assert len(stats["arrivals"]) == 1 and stats["arrivals"][0] >= stats["fault_at"]
    assert again == "assistant"


def test_hang_accepts_and_never_answers() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> tuple[RequestFailed, Any, str]:
        await _fault(fleet, http, "hang")
        # at 500 simulated seconds per second, a healthy answer takes milliseconds
        failed = await _failure(_chat(fleet, http, timeout_s=1.0))
        return failed, (await _stats(fleet, http))[0], await _healthy_again(fleet, http)

    failed, stats, again = on_two_replicas(scenario)
    assert failed.failure_class == FailureClass.TIMEOUT
    assert (stats["requests"], stats["faulted"], stats["admitted"]) == (1, 1, 0)
    assert again == "assistant"


def test_slow_takes_ten_times_the_engine_time_of_a_healthy_replica() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> list[dict[str, Any]]:
        await _fault(fleet, http, "slow", replica=1)
        await asyncio.gather(_chat(fleet, http, replica=0), _chat(fleet, http, replica=1))
        return await _stats(fleet, http)

    healthy, slow = on_two_replicas(scenario)
    assert (healthy["finished"], slow["finished"]) == (1, 1)
    assert slow["busy_s"] == pytest.approx(SLOW_FACTOR * healthy["busy_s"])


def test_invalid_json_answers_200_with_a_body_that_is_not_json() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> tuple[int, bytes, RequestFailed]:
        await _fault(fleet, http, "invalid_json")
        status, raw = await http.request_raw("POST", f"{fleet.base_urls[0]}/chat/completions", orjson.dumps(BODY))
        return status, raw, await _failure(_chat(fleet, http))

    status, raw, failed = on_two_replicas(scenario)
    assert status == 200 and raw.startswith(b'{"id":"chatcmpl-')
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    assert failed.failure_class == FailureClass.INVALID_RESPONSE


def test_reset_sends_the_head_and_part_of_the_body_then_closes() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> tuple[bytes, RequestFailed, str]:
        await _fault(fleet, http, "reset")
        port = int(fleet.base_urls[0].rsplit(":", 1)[1].split("/")[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        payload = orjson.dumps(BODY)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(payload), payload))
        received = await reader.read()  # until the server closes
        writer.close()
        return received, await _failure(_chat(fleet, http)), await _healthy_again(fleet, http)

    received, failed, again = on_two_replicas(scenario)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    length = int(next(line for line in head.split(b"\r\n") if line.startswith(b"content-length:")).split(b":")[1])
    assert 0 < len(body) < length
    assert failed.failure_class == FailureClass.INVALID_RESPONSE  # the reply began, then the connection closed
    assert again == "assistant"


def test_quota_serves_its_requests_then_answers_429_insufficient_quota() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> tuple[Any, int, Any, dict[str, str], Any]:
        await _fault(fleet, http, "quota", after=1)
        served = await _chat(fleet, http)
        headers: dict[str, str] = {}
        status, raw = await http.request_raw("POST", f"{fleet.base_urls[0]}/chat/completions", orjson.dumps(BODY),
                                             reply_headers=headers)
        models = await http.get_json(f"{fleet.base_urls[0]}/models")
        return served, status, orjson.loads(raw), headers, models

    served, status, refused, headers, models = on_two_replicas(scenario)
    assert served["choices"][0]["message"]["role"] == "assistant"
    assert (status, refused["error"]["type"], refused["error"]["code"]) == (429, "insufficient_quota",
                                                                            "insufficient_quota")
    assert headers["retry-after"] == str(QUOTA_RETRY_AFTER_S)
    assert models["data"][0]["id"] == MODEL


def test_kill_takes_the_replica_down_and_none_brings_it_back() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> tuple[RequestFailed, RequestFailed, str]:
        await _fault(fleet, http, "kill")
        chat = await _failure(_chat(fleet, http))
        models = await _failure(http.get_json(f"{fleet.base_urls[0]}/models"))
        return chat, models, await _healthy_again(fleet, http)

    chat, models, again = on_two_replicas(scenario)
    assert chat.failure_class == models.failure_class == FailureClass.CONNECT
    assert again == "assistant"


def test_an_unknown_fault_is_refused() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> RequestFailed:
        return await _failure(_fault(fleet, http, "melt"))

    assert on_two_replicas(scenario).status == 400
