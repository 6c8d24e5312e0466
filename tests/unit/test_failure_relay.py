"""A server relaying a downstream failure names the deepest hop's class, so the collector records what really broke."""

import orjson

from nemo_gym.failures import RequestFailed, failure_class_of, is_retryable
from nemo_gym.server.base import downstream_failed


def _relayed(failure_class: str, status: int | None, body: object = None) -> dict:
    response = downstream_failed(RequestFailed(failure_class, "boom", url="http://127.0.0.1:1/x", status=status,
                                               body=body))
    assert response.status_code == 502
    return orjson.loads(response.body)["error"]


def test_a_dead_model_behind_the_model_server_reads_connect_two_hops_up() -> None:
    # vllm_model could not reach vLLM: it answered 502 {"failure_class": "connect"} to the agent.
    from_model_server = {"error": {"failure_class": "connect", "message": "vLLM refused"}}
    error = _relayed("http_5xx", 502, from_model_server)
    assert error["failure_class"] == "connect" and error["upstream_status"] == 502
    # ...and the collector, reading the agent's 502, keeps that class and still retries it.
    at_collector = RequestFailed("http_5xx", "agent 502", status=502, body={"error": error})
    assert failure_class_of(at_collector) == "connect" and is_retryable(at_collector)


def test_a_bad_request_downstream_stays_a_4xx_and_is_not_retried() -> None:
    error = _relayed("http_4xx", 400)
    assert error["failure_class"] == "http_4xx"
    at_collector = RequestFailed("http_5xx", "agent 502", status=502, body={"error": error})
    assert failure_class_of(at_collector) == "http_4xx" and not is_retryable(at_collector)


def test_a_failure_without_a_relayed_class_keeps_its_own() -> None:
    assert _relayed("timeout", None)["failure_class"] == "timeout"
    assert _relayed("http_5xx", 503, b"not json")["failure_class"] == "http_5xx"
