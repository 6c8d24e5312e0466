"""The metric keys of multi-turn rollouts (NeMo RL's names) and how metrics of several batches combine."""

from typing import Any, Sequence

import torch


def batch_rollout_metrics(
    turn_counts: Sequence[int],
    assistant_tokens: Sequence[int],
    env_tokens: Sequence[int],
    terminated: Sequence[bool],
    truncated: Sequence[bool],
    max_turns_reached: Sequence[bool],
    total_rewards: Sequence[float],
) -> dict[str, Any]:
    """Rollout metrics over a batch of B samples, from per-sample counts. Token counts exclude the prompt."""
    n = len(turn_counts)
    if n == 0:
        return {}
    rewards = torch.as_tensor(list(total_rewards), dtype=torch.float64)
    return {
        "total_turns": int(sum(turn_counts)),
        "avg_turns_per_sample": sum(turn_counts) / n,
        "max_turns_per_sample": int(max(turn_counts)),
        "natural_termination_rate": sum(map(bool, terminated)) / n,
        "truncation_rate": sum(map(bool, truncated)) / n,
        "max_turns_reached_rate": sum(map(bool, max_turns_reached)) / n,
        "mean_total_tokens_per_sample": (sum(assistant_tokens) + sum(env_tokens)) / n,
        "mean_gen_tokens_per_sample": sum(assistant_tokens) / n,
        "mean_env_tokens_per_sample": sum(env_tokens) / n,
        "mean_total_reward": float(rewards.mean()),
        "max_total_reward": float(rewards.max()),
        "min_total_reward": float(rewards.min()),
    }


def merge_rollout_metrics(metrics: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Metrics of several batches or prompt groups as one: `total_*` add up, `max_*` / `min_*` take the extreme,
    every other number is averaged over the inputs that have it. Non-numbers are dropped."""
    merged: dict[str, Any] = {}
    values: dict[str, list[float]] = {}
    for entry in metrics:
        for key, value in entry.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.setdefault(key, []).append(value)
    for key, seen in values.items():
        if key.startswith("total_"):
            merged[key] = sum(seen)
        elif key.startswith("max_"):
            merged[key] = max(seen)
        elif key.startswith("min_"):
            merged[key] = min(seen)
        else:
            merged[key] = sum(seen) / len(seen)
    return merged
