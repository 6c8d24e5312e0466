"""Traces off cost nothing per request: no `traceparent` goes out (even when one came in), and no tracing code runs
for a request: a model server's generation requests are counted at every entry point of the tracer, and the count
must be 0. The same counts move once traces are on, so a zero is not a broken probe. (That nothing of opentelemetry
is imported with traces off: tests/unit/test_dependencies.py.)"""

from collections import Counter
from typing import Iterator

import pytest
from starlette.testclient import TestClient

from nemo_gym.config.servers import ServerSpec
from nemo_gym.config.traces import TracesSettings
from nemo_gym.errors import ConfigError
from nemo_gym.responses_api_models.vllm_model.app import VLLMModelServer
from nemo_gym.responses_api_models.vllm_model.tests.test_vllm_model import StubVLLM
from nemo_gym.traces import start, switch
from nemo_gym.traces.otel import Tracing
from tests.helpers.call_counts import count_calls
from tests.traces.otlp_receiver import OtlpReceiver

REQUESTS = 20
# Every way in: the per-request ones (headers out, span per route and per model call) and the app's build.
PROBES = ("with_traceparent", "parent_from", "span", "model_call", "traced_route")
# An upstream tracer's context arriving with a request: with traces off it goes no further.
INCOMING = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


@pytest.fixture(scope="module")
def model() -> Iterator[StubVLLM]:
    with StubVLLM() as stub:
        yield stub


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    return count_calls(monkeypatch, {name: (Tracing, name) for name in PROBES})


def _generate(model: StubVLLM) -> list[dict[str, str]]:
    """REQUESTS generation requests through vllm_model; the headers the endpoint got for them."""
    before = len(model.requests)
    server = VLLMModelServer(ServerSpec("policy", "responses_api_models", "vllm_model",
                                        {"model": "stub-model", "base_url": model.url}))
    with TestClient(server.app()) as client:
        for index in range(REQUESTS):
            reply = client.post("/v1/responses", json={"input": f"hello {index}"}, headers=INCOMING)
            assert reply.status_code == 200, reply.text
    return [request["headers"] for request in model.requests[before:]]


def test_off_sends_no_traceparent_and_calls_no_tracing_code(model: StubVLLM, calls: Counter[str]) -> None:
    assert switch.ACTIVE is None
    sent = _generate(model)
    assert len(sent) == REQUESTS and not any("traceparent" in headers for headers in sent)
    assert {name: calls[name] for name in PROBES} == dict.fromkeys(PROBES, 0)


def test_each_probe_counts_once_traces_are_on(model: StubVLLM, calls: Counter[str]) -> None:
    with OtlpReceiver() as receiver:
        start.start_tracing(TracesSettings(otlp_endpoint=receiver.url), "policy")
        try:
            sent = _generate(model)
        finally:
            start.stop_tracing()  # exports what is buffered
        spans = receiver.received()
    assert switch.ACTIVE is None
    assert all(calls[name] >= (1 if name == "traced_route" else REQUESTS) for name in PROBES), calls
    # Each request continued the incoming trace, and the endpoint was handed the model call's span.
    trace_id = INCOMING["traceparent"].split("-")[1]
    assert all(headers["traceparent"].split("-")[1] == trace_id for headers in sent)
    assert sum(span.name == "chat stub-model" for span in spans) == REQUESTS


def test_traces_without_the_extra_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start, "_EXTRA_MODULES", ("opentelemetry_as_if_not_installed",))
    with pytest.raises(ConfigError, match=r"traces extra is not installed.*pip install 'nemo_gym\[traces\]'"):
        start.start_tracing(TracesSettings(otlp_endpoint="http://127.0.0.1:4318"), "ng_collect_rollouts")
    assert switch.ACTIVE is None
