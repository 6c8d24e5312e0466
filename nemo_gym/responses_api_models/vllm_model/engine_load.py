"""How loaded each vLLM replica is, from vLLM's own `/metrics` (Prometheus text), for the collector's automatic
concurrency (rollout_collection/engine_level.py).

Per replica: the requests running and waiting (`vllm:num_requests_running`, `vllm:num_requests_waiting`), the share
of its KV cache in use (`vllm:kv_cache_usage_perc`, 0 to 1), the preemptions since it started
(`vllm:num_preemptions_total`), and its capacity: how many requests of `max_model_len` tokens its KV cache holds at
once, the "Maximum concurrency" vLLM logs at start (the `kv_cache_max_concurrency` label of
`vllm:cache_config_info`). A vLLM with several engines reports each; their sum is the replica's.
"""

import re
from dataclasses import dataclass

_SAMPLE = re.compile(r"^(vllm:[a-z_]+)(?:\{([^}]*)\})? ([0-9.eE+-]+|NaN)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class EngineLoad:
    running: int
    waiting: int
    kv_cache_usage: float  # 0 to 1; the mean over its engines
    preemptions: int  # since the replica started
    capacity: float | None  # requests of max_model_len tokens its KV cache holds at once (None: not reported)


def parse_metrics(text: str) -> EngineLoad:
    """The load in vLLM's `/metrics` answer `text`. ValueError when it has no vLLM request gauges (not a vLLM)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    capacity: float | None = None
    for name, labels, value in _SAMPLE.findall(text):
        number = float(value) if value != "NaN" else 0.0
        sums[name] = sums.get(name, 0.0) + number
        counts[name] = counts.get(name, 0) + 1
        if name == "vllm:cache_config_info":
            concurrency = dict(_LABEL.findall(labels)).get("kv_cache_max_concurrency", "")
            if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", concurrency):
                capacity = (capacity or 0.0) + float(concurrency)
    if "vllm:num_requests_running" not in sums or "vllm:num_requests_waiting" not in sums:
        raise ValueError("no vllm:num_requests_running / vllm:num_requests_waiting in its /metrics")
    usage = sums.get("vllm:kv_cache_usage_perc", 0.0) / max(1, counts.get("vllm:kv_cache_usage_perc", 1))
    return EngineLoad(running=int(sums["vllm:num_requests_running"]), waiting=int(sums["vllm:num_requests_waiting"]),
                      kv_cache_usage=round(usage, 4), preemptions=int(sums.get("vllm:num_preemptions_total", 0.0)),
                      capacity=capacity)
