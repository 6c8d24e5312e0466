"""Real Slurm: a 4-task collect array plus the dependent aggregate job, against an instant chat model."""

from pathlib import Path

import orjson

from nemo_gym.resources_servers.math.generate_arithmetic import generate_rows
from tests.slurm.util import (
    assert_merged_metrics,
    count_lines,
    instant_model,
    job_ids,
    keys_of,
    make_workdir,
    stub_args,
    stub_reward,
    submit,
    wait_for_jobs,
)

ROWS, REPEATS, SHARDS = 40, 4, 4


def test_array_then_aggregate_merges_every_rollout_once(tmp_path: Path, slurm_jobs: set[str]) -> None:
    with instant_model() as base_url:
        work = make_workdir(tmp_path, base_url, "instant-stub", ROWS)
        record = submit(slurm_jobs, work, *stub_args("run", SHARDS, REPEATS, parallel=8))
        wait_for_jobs(job_ids(record), work / "run" / "logs")

    run = work / "run"
    keys = keys_of(run / "rollouts.jsonl")
    assert len(keys) == len(set(keys)) == ROWS * REPEATS
    assert set(keys) == {(t, r) for t in range(ROWS) for r in range(REPEATS)}
    expected = {t: stub_reward(row) for t, row in enumerate(generate_rows(ROWS, 0))}
    metrics = assert_merged_metrics(run, ROWS, REPEATS, expected)
    assert 0 < metrics["mean/reward"] < 1  # the stub's known mix of right and wrong answers
    for shard in range(SHARDS):
        assert count_lines(run / "rollouts" / f"rollouts-shard{shard}-of{SHARDS}.jsonl") == ROWS * REPEATS // SHARDS
        assert "servers healthy" in (run / "logs" / f"shard{shard}.log").read_text()
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert summary["problems"] == []
    assert [s["rollouts"] for s in summary["shards"]] == [ROWS * REPEATS // SHARDS] * SHARDS
    aggregate_log = (run / "logs" / "aggregate.log").read_text()
    assert "merged: 160 rollouts" in aggregate_log and "DUPLICATES" in aggregate_log
