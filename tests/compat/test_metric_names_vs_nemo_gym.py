"""Our metrics under NeMo Gym's names hold NeMo Gym's values: the same rollouts go through NeMo Gym 0.4.0's own
`compute_aggregate_metrics` and `compute_pass_majority_metrics` (in its venv) and through our streamed accumulator;
every scalar NeMo Gym writes must be in ours with its value (tasks of uneven size, token usage, binary and
non-binary rewards, a rollout without a reward)."""

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from nemo_gym.metrics import AgentAccumulator, iter_groups
from tests.helpers.nemo_gym_reference import run_reference_python

# NeMo Gym's fields that are bookkeeping, not metrics: its sample row and rollout list per task, and the
# per-rollout-index list behind std_dev_across_runs.
NOT_COMPARED = {"sample", "rollout_infos", "per_sample_aggregate"}
REFERENCE = """
import json, sys
from nemo_gym.reward_profile import compute_aggregate_metrics, compute_pass_majority_metrics, _group_by_task
rows = json.load(open(sys.argv[1]))
result = compute_aggregate_metrics(rows)
passes = compute_pass_majority_metrics(_group_by_task([r for r in rows if "reward" in r]))[0]
print(json.dumps({"agent_metrics": result.agent_metrics, "key_metrics": result.key_metrics,
                  "group_level_metrics": result.group_level_metrics, "passes": passes}))
"""


def _rows(binary: bool) -> list[dict[str, Any]]:
    rng = random.Random(7)
    rows = []
    for task, size in enumerate([1, 3, 4, 4, 2, 5, 4]):
        for rollout in range(size):
            tokens = rng.randint(5, 90)
            rows.append({"_ng_task_index": task, "_ng_rollout_index": rollout,
                         "reward": float(rng.random() < 0.5) if binary else round(rng.random(), 3),
                         "steps": rng.randint(1, 4),
                         "response": {"output": [], "usage": {
                             "input_tokens": tokens, "output_tokens": tokens // 3, "total_tokens": tokens + tokens // 3,
                             "input_tokens_details": {"cached_tokens": 0}}}})
    return rows


def _theirs(tmp_path: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    code = f"import sys; sys.argv[1:] = [{str(tmp_path / 'rows.json')!r}]\n" + REFERENCE
    return json.loads(run_reference_python(code, tmp_path).strip().splitlines()[-1])


def _ours(rows: list[dict[str, Any]]) -> tuple[dict[str, float], dict[int, dict[str, Any]]]:
    accumulator = AgentAccumulator()
    try:
        for row in rows:
            accumulator.add(row)
        result = accumulator.finish()
        assert all(type(value) is float for value in result.agent_metrics.values())  # plain floats: JSON-ready
        return result.agent_metrics, {g["_ng_task_index"]: g for g in iter_groups(result.groups_path)}
    finally:
        accumulator.close()


def _assert_contains(theirs: dict[str, Any], ours: dict[str, Any], where: str) -> None:
    for name, value in theirs.items():
        if name in NOT_COMPARED:
            continue
        assert name in ours, f"{where}: NeMo Gym's {name} is missing from ours"
        assert math.isclose(value, ours[name], rel_tol=1e-9, abs_tol=1e-9), (where, name, value, ours[name])


@pytest.mark.parametrize("binary", [True, False], ids=["binary_rewards", "graded_rewards"])
def test_every_nemo_gym_metric_is_ours_with_its_value(tmp_path: Path, binary: bool) -> None:
    rows = _rows(binary)
    del rows[5]["reward"]  # a rollout without a reward: left out of the reward statistics on both sides
    theirs = _theirs(tmp_path, rows)
    agent_metrics, groups = _ours(rows)
    assert {"mean/input_tokens", "std/output_tokens", "median/total_tokens", "mean/steps"} <= set(agent_metrics)
    _assert_contains(theirs["agent_metrics"], agent_metrics, "agent_metrics")
    _assert_contains(theirs["key_metrics"], agent_metrics, "key_metrics")
    assert sorted(groups) == sorted(g["_ng_task_index"] for g in theirs["group_level_metrics"])
    for group in theirs["group_level_metrics"]:
        _assert_contains(group, groups[group["_ng_task_index"]], f"task {group['_ng_task_index']}")
    assert any(name.startswith("pass@5/") for name in theirs["passes"])
    _assert_contains(theirs["passes"], agent_metrics, "pass@k")
