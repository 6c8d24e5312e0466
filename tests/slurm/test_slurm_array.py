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
    ng_slurm_submit,
    stub_args,
    stub_reward,
    wait_for_jobs,
)

ROWS, REPEATS, SHARDS = 40, 4, 4


def test_array_then_aggregate_merges_every_rollout_once(tmp_path: Path, slurm_jobs: set[str]) -> None:
    with instant_model() as base_url:
        work = make_workdir(tmp_path, base_url, "instant-stub", ROWS)
        submitted = ng_slurm_submit(work, *stub_args("run", SHARDS, REPEATS, parallel=8))
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        record = orjson.loads((work / "run" / "slurm" / "submission.json").read_bytes())
        slurm_jobs |= job_ids(record)
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
    assert f"  math_simple_agent: mean/reward={metrics['mean/reward']:.4g}" in aggregate_log  # the headline metrics

    # The submission says how to follow it, and each attempt's log folder is named as squeue names the task.
    array, aggregate = record["submissions"][0]["collect_job_id"], record["submissions"][0]["aggregate_job_id"]
    assert f"follow it:   squeue -j {array},{aggregate}\n" in submitted.stdout
    assert f"tail -f {run}/logs/shard*.log\n" in submitted.stdout
    for shard in range(SHARDS):
        assert [p.name for p in (run / "logs" / f"shard{shard}").iterdir()] == [f"{array}_{shard}-try0"]
        assert f"Slurm job {array}_{shard} (job id " in (run / "logs" / f"shard{shard}.log").read_text()
    assert [p.name for p in (run / "logs" / "aggregate").iterdir()] == [f"{aggregate}-try0"]
