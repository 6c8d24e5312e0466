"""Per task `expected_num_rollouts` / `missing_num_rollouts` (NeMo Gym's names): the task's rollouts still failed in
the failures sidecars count as missing; a failure whose key later succeeded (in another shard) does not."""

from pathlib import Path

import orjson

from nemo_gym.metrics import iter_groups
from nemo_gym.rollout_collection.aggregate import _failures_of, _read_rows
from nemo_gym.run_files.key_order import ReadStats, iter_unique_lines
from nemo_gym.run_files.paths import RunPaths


def _write(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _row(task: int, rollout: int, agent: str = "a", **extra: object) -> dict:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agent}, "reward": 1.0, **extra}


def test_missing_rollouts_are_the_outstanding_failures_of_the_task(tmp_path: Path) -> None:
    shard_a = _write(tmp_path / "a.jsonl", [_row(0, 0), _row(0, 1), _row(1, 0), _row(2, 0, agent="b")])
    shard_b = _write(tmp_path / "b.jsonl", [_row(1, 2)])
    _write(RunPaths(shard_a).failures, [_row(0, 2, failure_class="timeout"), _row(1, 1, failure_class="http_5xx"),
                                         _row(1, 2, failure_class="connect"), _row(2, 1, agent="b", failure_class="x")])
    failures = _failures_of([shard_a, shard_b])
    accumulators: dict = {}
    _read_rows(iter_unique_lines([shard_a, shard_b], ReadStats(), tmp_path), failures, accumulators, tmp_path)
    groups = {agent: {g["_ng_task_index"]: g for g in iter_groups(acc.finish().groups_path)}
              for agent, acc in accumulators.items()}
    try:
        counts = {agent: {task: (g["num_rollouts"], g["expected_num_rollouts"], g["missing_num_rollouts"])
                          for task, g in by_task.items()} for agent, by_task in groups.items()}
        # Task 1: (1, 2) failed in shard a but succeeded in shard b, so only (1, 1) is missing.
        assert counts == {"a": {0: (2, 3, 1), 1: (2, 3, 1)}, "b": {2: (1, 2, 1)}}
        assert groups["a"][0]["reward_profile_completion_pct"] == 100.0 * 2 / 3
    finally:
        for accumulator in accumulators.values():
            accumulator.close()
