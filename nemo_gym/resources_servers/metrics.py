"""Generic aggregate statistics over rollout rows: mean/std/min/max of every numeric top-level field.

Streaming and mergeable, so memory stays constant in the number of rows and shards aggregated in parallel can be
combined exactly. Means and variances use Welford's update (and Chan's merge) rather than raw sums of squares, which
lose all precision when a field's values are large and close together (token counts, latencies).
"""

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from nemo_gym.run_format import INTERNAL_PREFIX, TASK_INDEX


@dataclass
class FieldStats:
    """Running count, mean, sum of squared deviations, min and max of one field."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = math.inf
    max: float = -math.inf

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)
        self.min = min(self.min, value)
        self.max = max(self.max, value)

    def merge(self, other: "FieldStats") -> None:
        if other.count == 0:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * other.count / total
        self.m2 += other.m2 + delta * delta * self.count * other.count / total
        self.count = total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1, as NeMo Gym's pandas `std`; 0 for a single value)."""
        return math.sqrt(max(self.m2, 0.0) / (self.count - 1)) if self.count > 1 else 0.0


def numeric_fields(row: dict[str, Any]) -> Iterator[tuple[str, float]]:
    """(key, value) for every finite numeric top-level field; bools count as 0/1, `_ng_*` keys are bookkeeping."""
    for key, value in row.items():
        if key.startswith(INTERNAL_PREFIX) or not isinstance(value, (int, float)):
            continue
        number = float(value)
        if math.isfinite(number):
            yield key, number


class NumericStats:
    """Per-field FieldStats over a stream of rows."""

    def __init__(self) -> None:
        self.fields: dict[str, FieldStats] = defaultdict(FieldStats)

    def add_row(self, row: dict[str, Any]) -> None:
        for key, value in numeric_fields(row):
            self.fields[key].add(value)

    def merge(self, other: "NumericStats") -> None:
        for key, stats in other.fields.items():
            self.fields[key].merge(stats)

    def as_metrics(self) -> dict[str, float]:
        """Flat `{"mean/<field>": ..., "std/<field>": ..., "min/<field>": ..., "max/<field>": ...}`."""
        metrics: dict[str, float] = {}
        for key in sorted(self.fields):
            stats = self.fields[key]
            metrics[f"mean/{key}"] = stats.mean
            metrics[f"std/{key}"] = stats.std
            metrics[f"min/{key}"] = stats.min
            metrics[f"max/{key}"] = stats.max
        return metrics


def summarize(rows: Iterable[dict[str, Any]]) -> dict[str, float]:
    """The flat numeric stats of `rows` (see NumericStats.as_metrics)."""
    stats = NumericStats()
    for row in rows:
        stats.add_row(row)
    return stats.as_metrics()


def group_mean_reward(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """`[{"_ng_task_index": i, "mean/reward": ...}]` per task, in task order; rows without a task index are skipped."""
    groups: dict[int, FieldStats] = defaultdict(FieldStats)
    for row in rows:
        task = row.get(TASK_INDEX)
        reward = row.get("reward")
        if task is None or not isinstance(reward, (int, float)):
            continue
        groups[int(task)].add(float(reward))
    return [{TASK_INDEX: task, "mean/reward": groups[task].mean} for task in sorted(groups)]


def mean_reward_by(rows: Iterable[dict[str, Any]], field: str) -> dict[str, float]:
    """`{"<field>_<value>/mean_reward": ..., "<field>_<value>/num_rollouts": ...}` per value of a scalar field,
    e.g. `level_1/mean_reward`; rows without the field (or without a numeric reward) are left out."""
    groups: dict[Any, FieldStats] = defaultdict(FieldStats)
    for row in rows:
        value, reward = row.get(field), row.get("reward")
        if isinstance(value, (str, int, float)) and isinstance(reward, (int, float)):
            groups[value].add(float(reward))
    metrics: dict[str, float] = {}
    for value in sorted(groups, key=str):
        metrics[f"{field}_{value}/mean_reward"] = groups[value].mean
        metrics[f"{field}_{value}/num_rollouts"] = groups[value].count
    return metrics


def headline_metrics(agent_metrics: dict[str, Any]) -> dict[str, Any]:
    """The default key metrics: mean reward, its 95% interval, and the widest pass@k / majority@k computed.

    Over rows alone (no library metrics) that is just `mean/reward`.
    """
    keys = ["mean/reward", "ci95_low/reward", "ci95_high/reward"]
    for prefix in ("pass@1[avg-of-", "pass@", "majority@"):
        ks = [key for key in agent_metrics if key.startswith(prefix) and "/" not in key and "[" not in key[len(prefix):]]
        if ks:
            keys.append(max(ks, key=lambda key: int(key[len(prefix):].rstrip("]"))))
    return {key: agent_metrics[key] for key in keys if key in agent_metrics}
