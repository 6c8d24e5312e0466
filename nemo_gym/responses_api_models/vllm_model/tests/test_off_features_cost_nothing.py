"""A feature that is off does no work per request: with one replica and no rate limits, a generation request through
vllm_model never takes the rate limiter's shared lock, never re-encodes its body to count its tokens, and never enters
the routing or the hang watch. Each count is checked to move once the feature is on, so a zero is not a broken probe.
"""

from collections import Counter
from typing import Any, Iterator

import pytest
from starlette.testclient import TestClient

from nemo_gym.config.servers import ServerSpec
from nemo_gym.responses_api_models.endpoint_calls import _TokenEstimate
from nemo_gym.responses_api_models.rate_limits import _SharedState
from nemo_gym.responses_api_models.vllm_model.app import VLLMModelServer
from nemo_gym.responses_api_models.vllm_model.hang_watch import HangWatch
from nemo_gym.responses_api_models.vllm_model.routing import ReplicaRouter
from nemo_gym.responses_api_models.vllm_model.tests.test_vllm_model import StubVLLM
from tests.helpers.call_counts import count_calls

REQUESTS = 20
PROBES: dict[str, tuple[type, str]] = {
    "limiter lock": (_SharedState, "update"),
    "token count": (_TokenEstimate, "charge"),
    "routing": (ReplicaRouter, "routed"),
    "hang watch": (HangWatch, "watched"),
}


@pytest.fixture(scope="module")
def replicas() -> Iterator[tuple[StubVLLM, StubVLLM]]:
    with StubVLLM() as a, StubVLLM() as b:
        yield a, b


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    return count_calls(monkeypatch, PROBES)


def _generate(name: str, settings: dict[str, Any]) -> None:
    server = VLLMModelServer(ServerSpec(name, "responses_api_models", "vllm_model",
                                        {"model": "stub-model", **settings}))
    with TestClient(server.app()) as client:
        for index in range(REQUESTS):
            reply = client.post("/v1/responses", json={"input": f"hello {index}", "max_output_tokens": 5})
            assert reply.status_code == 200, reply.text


def test_one_replica_without_limits_does_no_routing_limiting_or_counting(replicas, calls: Counter[str]) -> None:
    _generate("plain", {"base_url": replicas[0].url})
    assert len(replicas[0].requests) == REQUESTS
    assert {name: calls[name] for name in PROBES} == dict.fromkeys(PROBES, 0)


def test_each_probe_counts_once_its_feature_is_on(replicas, calls: Counter[str]) -> None:
    _generate("limited", {"base_url": [replicas[0].url, replicas[1].url], "max_tokens_per_minute": 10_000_000})
    assert all(calls[name] >= REQUESTS for name in PROBES), calls
