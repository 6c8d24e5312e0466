"""Simulated replicas over HTTP, as vllm_model sees them: the endpoints it calls, a conversation's next turn hitting
the prefix cache, token ids on request, errors as vLLM words them, and a replica that dies under a request (a
connection failure at our client, the class the router takes down) and comes back."""

import asyncio
from typing import Any

import pytest

from benchmarks.fleet.fleet import MAX_MODEL_LEN, SimFleet
from benchmarks.fleet.workload import Workload
from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient
from tests.fleet.sim_replicas import MODEL, on_two_replicas
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
FIRST = {"role": "user", "content": "What's the weather in Lima? [turns=2] " + "words " * 300}


def test_the_endpoints_vllm_model_calls() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> tuple[Any, Any, Any, Any]:
        url = fleet.base_urls[0]
        models = await http.get_json(f"{url}/models")
        body = {"model": MODEL, "messages": [FIRST], "tools": TOOLS, "max_tokens": 1024,
                "return_token_ids": True, "logprobs": True}
        first = await http.post_json(f"{url}/chat/completions", body)
        message = first["choices"][0]["message"]
        result = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "sunny"}
        second = await http.post_json(f"{url}/chat/completions",
                                      {**body, "messages": [FIRST, message, result]})
        stats = await http.get_json(f"{fleet.control_url}/fleet/stats")
        return models, first, second, stats

    models, first, second, stats = on_two_replicas(scenario)
    assert models["data"] == [{"id": MODEL, "object": "model", "owned_by": "sim", "max_model_len": MAX_MODEL_LEN}]
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Lima"}'}
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    usage = first["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert len(first["prompt_token_ids"]) == usage["prompt_tokens"]
    assert len(first["choices"][0]["token_ids"]) == len(first["choices"][0]["logprobs"]["content"]) \
        == usage["completion_tokens"]
    # the second turn: its prompt starts with the first turn's prompt and answer, cached on this replica
    assert second["choices"][0]["finish_reason"] == "stop"
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] - 16 < cached < second["usage"]["prompt_tokens"]
    replica = stats["replicas"][0]
    assert (replica["finished"], replica["cached_tokens"], stats["replicas"][1]["finished"]) == (2, cached, 0)


def test_errors_are_vllm_s() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> list[RequestFailed]:
        url = fleet.base_urls[1]
        failures = []
        for body in ({"model": "other", "messages": [FIRST]}, {"model": MODEL, "messages": []}):
            with pytest.raises(RequestFailed) as failed:
                await http.post_json(f"{url}/chat/completions", body)
            failures.append(failed.value)
        return failures

    wrong_model, no_messages = on_two_replicas(scenario)
    assert wrong_model.status == 404 and "does not exist" in str(wrong_model.body)
    assert no_messages.status == 400


def test_a_replica_that_dies_under_a_request_is_a_connection_failure_until_it_comes_back() -> None:
    async def scenario(fleet: SimFleet, http: HttpClient) -> tuple[RequestFailed, RequestFailed, Any]:
        url = fleet.base_urls[0]
        body = {"model": MODEL, "messages": [FIRST], "max_tokens": 10}
        long = asyncio.create_task(http.post_json(f"{url}/chat/completions", {**body, "max_tokens": 100_000}))
        while (await http.get_json(f"{fleet.control_url}/fleet/stats"))["replicas"][0]["running"] < 1:
            await asyncio.sleep(0.001)
        await http.post_json(f"{fleet.control_url}/fleet/kill", {"replica": 0})
        with pytest.raises(RequestFailed) as in_flight:
            await long
        with pytest.raises(RequestFailed) as refused:
            await http.get_json(f"{url}/models")
        await http.post_json(f"{fleet.control_url}/fleet/revive", {"replica": 0})
        return in_flight.value, refused.value, await http.post_json(f"{url}/chat/completions", body)

    # In real time, a 100,000-token answer takes ten minutes: the kill comes first by construction.
    endless = Workload(name="endless", turns=1, prompt_tokens=400, tool_result_tokens=0, output_median=100_000,
                       output_sigma=0.0, max_tokens=100_000)
    in_flight, refused, served = on_two_replicas(scenario, endless, scale=1.0)
    assert in_flight.failure_class == FailureClass.CONNECT
    assert refused.failure_class == FailureClass.CONNECT
    assert served["choices"][0]["message"]["role"] == "assistant"
