"""Model-call metrics from the rows' per-call records: percentiles within 1% of the exact value at any count, 429s,
retries and token totals, per endpoint as well when an agent used several; rows without records add nothing."""

import random

import pytest

from nemo_gym.metrics.accumulator import AgentAccumulator
from nemo_gym.metrics.call_metrics import CallAccumulator


def _row(task: int, calls: list[dict[str, object]]) -> dict[str, object]:
    return {"_ng_task_index": task, "_ng_rollout_index": 0, "reward": 1.0, "_ng_model_calls": calls}


def _call(endpoint: str, latency_s: float, attempts: int = 1, limited: int = 0) -> dict[str, object]:
    return {"endpoint": endpoint, "model": "m", "started_at": 100.0, "latency_s": latency_s, "wait_s": 0.5,
            "attempts": attempts, "rate_limited": limited, "input_tokens": 10, "output_tokens": 4,
            "cached_tokens": 2, "reasoning_tokens": None}


def test_percentiles_are_within_one_percent_of_the_exact_ones() -> None:
    rng = random.Random(3)
    latencies = [rng.lognormvariate(0.0, 0.8) for _ in range(20_000)]
    accumulator = CallAccumulator()
    for task, latency in enumerate(latencies):
        accumulator.add(_row(task, [_call("e", latency)]))
    metrics = accumulator.metrics()
    ordered = sorted(latencies)
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        exact = ordered[int(q * len(ordered) + 0.999999) - 1]  # nearest rank
        assert metrics[f"model_calls/latency_{name}_s"] == pytest.approx(exact, rel=0.01)


def test_counts_and_endpoints() -> None:
    accumulator = AgentAccumulator()
    accumulator.add(_row(0, [_call("a", 1.0), _call("b", 2.0, attempts=3, limited=2)]))
    accumulator.add(_row(1, [_call("a", 1.0)]))
    accumulator.add({"_ng_task_index": 2, "_ng_rollout_index": 0, "reward": 0.0})  # no records: not counted
    try:
        result = accumulator.finish()
    finally:
        accumulator.close()
    metrics = result.agent_metrics
    assert (metrics["model_calls/count"], metrics["model_calls/per_rollout"]) == (3.0, 1.5)
    assert (metrics["model_calls/rate_limited"], metrics["model_calls/retries"]) == (2.0, 2.0)
    assert (metrics["model_calls/input_tokens"], metrics["model_calls/cached_tokens"]) == (30.0, 6.0)
    assert "model_calls/reasoning_tokens" not in metrics  # no endpoint reported any
    assert metrics["model_calls/b/rate_limited"] == 2.0 and metrics["model_calls/a/count"] == 2.0
    assert [entry["endpoint"] for entry in result.model_calls] == ["a", "b"]


def test_one_endpoint_gets_no_per_endpoint_copies() -> None:
    accumulator = CallAccumulator()
    accumulator.add(_row(0, [_call("a", 1.0)]))
    assert not any(key.startswith("model_calls/a/") for key in accumulator.metrics())


def test_the_figures_over_all_endpoints_are_those_of_all_their_calls() -> None:
    # Each call is counted once, in its endpoint's figures; the overall ones are merged from them.
    rng = random.Random(5)
    calls = [{**_call(rng.choice("abc"), rng.lognormvariate(0.0, 1.0), attempts=rng.randint(1, 3)),
              "started_at": rng.uniform(0.0, 50.0), "cost_usd": rng.choice([None, 0.001])} for _ in range(500)]
    split, together = CallAccumulator(), CallAccumulator()
    for task, call in enumerate(calls):
        split.add(_row(task, [call]))
        together.add(_row(task, [{**call, "endpoint": "all"}]))
    overall = {name: value for name, value in split.metrics().items() if name.count("/") == 1}
    assert overall == pytest.approx(together.metrics())
    assert split.metrics()["model_calls/a/count"] < 500  # the endpoints' own figures are there too
