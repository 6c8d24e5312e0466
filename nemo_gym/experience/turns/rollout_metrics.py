"""The metrics of multi-turn rollouts (NeMo RL's keys): computed one way, from per-completion counts, and merged one
way across batches or prompt groups."""

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import torch


class RolloutCounts(Protocol):
    """What the metrics read of one completion: CompletionCounts, or a turn loop's own progress record."""

    @property
    def turns(self) -> int: ...
    @property
    def assistant_tokens(self) -> int: ...
    @property
    def env_tokens(self) -> int: ...
    @property
    def terminated(self) -> bool: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def max_turns_reached(self) -> bool: ...
    @property
    def total_reward(self) -> float: ...


@dataclass(frozen=True)
class CompletionCounts:
    """What the metrics need of one completion (token counts exclude the prompt). The turn loops' own progress
    records have these fields too, and are passed as they are."""

    turns: int
    assistant_tokens: int
    env_tokens: int
    terminated: bool
    truncated: bool
    max_turns_reached: bool
    total_reward: float


def batch_rollout_metrics(samples: Sequence[RolloutCounts]) -> dict[str, Any]:
    """Rollout metrics over a batch of B completions."""
    n = len(samples)
    if n == 0:
        return {}
    turns = [s.turns for s in samples]
    assistant_tokens, env_tokens = sum(s.assistant_tokens for s in samples), sum(s.env_tokens for s in samples)
    rewards = torch.as_tensor([s.total_reward for s in samples], dtype=torch.float64)
    return {
        "total_turns": int(sum(turns)),
        "avg_turns_per_sample": sum(turns) / n,
        "max_turns_per_sample": int(max(turns)),
        "natural_termination_rate": sum(bool(s.terminated) for s in samples) / n,
        "truncation_rate": sum(bool(s.truncated) for s in samples) / n,
        "max_turns_reached_rate": sum(bool(s.max_turns_reached) for s in samples) / n,
        "mean_total_tokens_per_sample": (assistant_tokens + env_tokens) / n,
        "mean_gen_tokens_per_sample": assistant_tokens / n,
        "mean_env_tokens_per_sample": env_tokens / n,
        "mean_total_reward": float(rewards.mean()),
        "max_total_reward": float(rewards.max()),
        "min_total_reward": float(rewards.min()),
    }


# How a key of `batch_rollout_metrics` combines across batches; every other number (the rates, the means, an agent's
# `<agent>/mean_reward`) is a per-completion mean, averaged: exact for batches of equal size, as a step's groups are.
_MERGE: dict[str, Callable[[list[float]], float]] = {
    "total_turns": sum,
    "max_turns_per_sample": max,
    "max_total_reward": max,
    "min_total_reward": min,
}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def merge_rollout_metrics(metrics: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Metrics of several batches or prompt groups as one: `total_turns` adds up, the `max_*_per_sample` /
    `max_total_reward` / `min_total_reward` keys take the extreme, every other number is averaged over the inputs
    that have it (a rate such as `max_turns_reached_rate` too). Non-numbers are dropped."""
    values: dict[str, list[float]] = {}
    for entry in metrics:
        for key, value in entry.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.setdefault(key, []).append(value)
    return {key: _MERGE.get(key, _mean)(seen) for key, seen in values.items()}
