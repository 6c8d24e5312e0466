"""Rollout metrics merged across prompt groups equal the metrics of all their completions at once."""

import pytest

from nemo_gym.experience.turns.rollout_metrics import CompletionCounts, batch_rollout_metrics, merge_rollout_metrics


def _completion(turns: int, reward: float, *, max_turns_reached: bool = False, truncated: bool = False,
                gen: int = 10, env: int = 3) -> CompletionCounts:
    return CompletionCounts(turns=turns, assistant_tokens=gen * turns, env_tokens=env * turns,
                            terminated=not truncated, truncated=truncated, max_turns_reached=max_turns_reached,
                            total_reward=reward)


def test_merging_groups_of_equal_size_gives_the_metrics_of_their_union() -> None:
    first = [_completion(4, 1.0, max_turns_reached=True), _completion(4, 0.5, max_turns_reached=True, truncated=True)]
    second = [_completion(1, 0.0, gen=7), _completion(2, 0.25, env=0)]
    merged = merge_rollout_metrics([{**batch_rollout_metrics(first), "agent/mean_reward": 0.75, "note": "x"},
                                    {**batch_rollout_metrics(second), "agent/mean_reward": 0.125}])
    union = batch_rollout_metrics(first + second)
    assert merged.pop("agent/mean_reward") == pytest.approx(0.4375) and "note" not in merged
    assert merged.keys() == union.keys()
    for key, value in union.items():
        assert merged[key] == pytest.approx(value), key
    # A rate whose name starts with max_ is a mean like any other rate, not an extreme.
    assert merged["max_turns_reached_rate"] == 0.5
    assert (merged["total_turns"], merged["max_turns_per_sample"]) == (11, 4)
    assert (merged["max_total_reward"], merged["min_total_reward"]) == (1.0, 0.0)


def test_nothing_to_merge() -> None:
    assert merge_rollout_metrics([]) == {} and batch_rollout_metrics([]) == {}
