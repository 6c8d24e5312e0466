"""Metrics of the model calls behind the rollouts: latency percentiles per endpoint, tokens per second, 429s, retries.

Fed each row's per-call records (`nemo_gym.model_calls`, the row's `_ng_model_calls`) by the one aggregation pass,
in constant memory: latencies go into log-spaced buckets 1% wide, so p50/p95/p99 are within 1% of the exact value
however many calls there were. An agent's `agent_metrics` get the figures over all its calls as `model_calls/...`
(and per endpoint as `model_calls/<endpoint>/...` when it used more than one); the report and the viewer show the
per-endpoint table (`EndpointStats.summary`). Costs are the ones the collector recorded in each call
(`nemo_gym.pricing`): `model_calls/cost_usd` sums the priced rollouts, `model_calls/cost_usd_per_rollout` is their
mean; neither is there when no call was priced.
"""

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from nemo_gym.model_calls import ModelCall, calls_of
from nemo_gym.pricing import rollout_cost

PREFIX = "model_calls"
COST_METRIC = f"{PREFIX}/cost_usd"  # an agent's total: the run's is the sum over its agents
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
TOKEN_KINDS = ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")
_BUCKET_GROWTH = 1.01  # a bucket's upper edge over its lower one: 1% resolution
_LOG_GROWTH = math.log(_BUCKET_GROWTH)
_SMALLEST_S = 1e-6


def _bucket(seconds: float) -> int:
    return math.floor(math.log(max(seconds, _SMALLEST_S)) / _LOG_GROWTH)


def _bucket_value(bucket: int) -> float:
    """The middle of a bucket (geometric): within half a percent of every latency in it."""
    return math.exp((bucket + 0.5) * _LOG_GROWTH)


@dataclass
class EndpointStats:
    """Everything counted for the calls to one endpoint."""

    calls: int = 0
    attempts: int = 0
    rate_limited: int = 0
    latency_sum_s: float = 0.0
    wait_sum_s: float = 0.0
    latencies: Counter[int] = field(default_factory=Counter)
    tokens: dict[str, int] = field(default_factory=dict)  # per kind, over the calls that reported it
    first_start: float = math.inf
    last_end: float = -math.inf
    cost_usd: float | None = None  # over the calls with a recorded cost; None when none had one

    def add(self, call: ModelCall) -> None:
        self.calls += 1
        self.attempts += call.attempts
        self.rate_limited += call.rate_limited
        self.latency_sum_s += call.latency_s
        self.wait_sum_s += call.wait_s
        self.latencies[_bucket(call.latency_s)] += 1
        for kind in TOKEN_KINDS:
            count = getattr(call, kind)
            if count is not None:
                self.tokens[kind] = self.tokens.get(kind, 0) + count
        if call.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + call.cost_usd
        self.first_start = min(self.first_start, call.started_at)
        self.last_end = max(self.last_end, call.started_at + call.wait_s + call.latency_s)

    def merge(self, other: "EndpointStats") -> None:
        """Count `other`'s calls in too: the figures are those of both sets of calls together."""
        self.calls += other.calls
        self.attempts += other.attempts
        self.rate_limited += other.rate_limited
        self.latency_sum_s += other.latency_sum_s
        self.wait_sum_s += other.wait_sum_s
        self.latencies.update(other.latencies)
        for kind, count in other.tokens.items():
            self.tokens[kind] = self.tokens.get(kind, 0) + count
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd
        self.first_start = min(self.first_start, other.first_start)
        self.last_end = max(self.last_end, other.last_end)

    def quantile(self, q: float) -> float:
        """The latency that a share `q` of the calls did not exceed (nearest rank, bucketed)."""
        rank = max(1, math.ceil(q * self.calls))
        seen = 0
        for bucket in sorted(self.latencies):
            seen += self.latencies[bucket]
            if seen >= rank:
                return _bucket_value(bucket)
        return math.nan

    def summary(self, rollouts: int) -> dict[str, float]:
        """The figures of these calls, by name; `rollouts`: the rollouts they served."""
        span = self.last_end - self.first_start
        out: dict[str, float] = {
            "count": float(self.calls),
            "per_rollout": self.calls / rollouts if rollouts else math.nan,
            **{f"latency_{name}_s": self.quantile(q) for name, q in QUANTILES},
            "latency_mean_s": self.latency_sum_s / self.calls,
            "wait_mean_s": self.wait_sum_s / self.calls,
            "rate_limited": float(self.rate_limited),
            "rate_limited_per_rollout": self.rate_limited / rollouts if rollouts else math.nan,
            "retries": float(self.attempts - self.calls),
            "retries_per_rollout": (self.attempts - self.calls) / rollouts if rollouts else math.nan,
        }
        for kind, total in sorted(self.tokens.items()):
            out[kind] = float(total)
        if "output_tokens" in self.tokens and span > 0:
            out["output_tokens_per_s"] = self.tokens["output_tokens"] / span
        if self.cost_usd is not None:
            out["cost_usd"] = self.cost_usd
        return out


class CallAccumulator:
    """One agent's model calls, per endpoint."""

    def __init__(self) -> None:
        self.rollouts = 0  # rollouts whose row listed its calls
        self.endpoints: dict[str, EndpointStats] = {}  # each call is counted once, in its endpoint's
        self.cost_usd = 0.0  # over the priced rollouts
        self.priced_rollouts = 0

    def add(self, row: dict[str, Any]) -> None:
        calls = calls_of(row)
        if not calls:
            return
        self.rollouts += 1
        usd = rollout_cost(calls)
        if usd is not None:
            self.cost_usd += usd
            self.priced_rollouts += 1
        for call in calls:
            stats = self.endpoints.get(call.endpoint)
            if stats is None:
                stats = self.endpoints[call.endpoint] = EndpointStats()
            stats.add(call)

    def overall(self) -> EndpointStats:
        """The figures over every endpoint's calls."""
        total = EndpointStats()
        for stats in self.endpoints.values():
            total.merge(stats)
        return total

    def metrics(self) -> dict[str, float]:
        """`model_calls/...` over all calls, and per endpoint when there were several; {} without records."""
        if not self.endpoints:
            return {}
        out = {f"{PREFIX}/{name}": value for name, value in self.overall().summary(self.rollouts).items()}
        if self.priced_rollouts:  # the sum of the rollouts' costs, as the collector adds them up
            out[COST_METRIC] = self.cost_usd
            out[f"{COST_METRIC}_per_rollout"] = self.cost_usd / self.priced_rollouts
        if len(self.endpoints) > 1:
            for endpoint, stats in sorted(self.endpoints.items()):
                out.update({f"{PREFIX}/{endpoint}/{name}": value
                            for name, value in stats.summary(self.rollouts).items()})
        return out

    def table(self) -> list[dict[str, Any]]:
        """One row per endpoint, for the report and the viewer."""
        return [{"endpoint": endpoint, **stats.summary(self.rollouts)}
                for endpoint, stats in sorted(self.endpoints.items())]


def call_table(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-endpoint table of `rows`' model calls (what the viewer shows of a run)."""
    accumulator = CallAccumulator()
    for row in rows:
        accumulator.add(row)
    return accumulator.table()
