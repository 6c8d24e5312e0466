"""The drain margin before a deadline: no rollout starts that the time left cannot hold, those in flight finish, the
run exits with status 79 and a resume completes it exactly once; a rollout still running at the deadline is stopped
there (bounded), and a deadline too short to finish any rollout exits 1, not 79, so a job script never requeues a
run that cannot progress. The deadline comes from +deadline or Slurm's squeue; each of squeue's failures is typed."""

import os
import stat
import time
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import ConfigError, DownstreamError
from nemo_gym.exit_status import EXIT_DEADLINE, EXIT_DOWNSTREAM
from nemo_gym.rollout_collection import deadline as deadline_module
from nemo_gym.rollout_collection.deadline import MARGIN_FACTOR, Deadline, DrainMargin, find_deadline, parse_deadline
from tests.collection.conftest import CollectionStack
from tests.collection.util import keys, read_rows, run_cli, sidecar, write_rows

ROWS, IN_FLIGHT = 40, 4
PACED_S = 0.5  # conftest's paced_agent: every rollout takes this long, so the run needs ROWS / IN_FLIGHT * PACED_S


def test_deadline_forms() -> None:
    now = 1_000_000.0
    assert parse_deadline("90m", now) == now + 5400
    assert parse_deadline("1h30m", now) == now + 5400
    assert parse_deadline("3600s", now) == parse_deadline("3600", now) == now + 3600
    assert parse_deadline("2026-12-07T18:00:00+00:00", now) == datetime(2026, 12, 7, 18, tzinfo=timezone.utc).timestamp()
    with pytest.raises(ConfigError, match=r"^'tomorrow' is neither a time .* nor a duration"):
        parse_deadline("tomorrow", now)
    assert find_deadline("off", 0) is None
    assert find_deadline("10m", 30, now) == Deadline(now + 600 - 30, "+deadline=10m")


def test_a_malformed_deadline_is_refused_before_anything_is_written(collection_stack: CollectionStack,
                                                                    tmp_path: Path) -> None:
    refused = _collect(collection_stack, tmp_path, "agent_a", "+deadline=tomorrow")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "+deadline 'tomorrow' is neither a time (2026-12-07T18:00:00) nor a duration" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]  # no output, sidecar or manifest


def test_the_margin_is_the_recent_p95_and_a_quarter() -> None:
    margin = DrainMargin(Deadline(time.time() + 100, "test"))
    assert margin.check() is None  # nothing finished yet: nothing to go by
    for duration in [1.0] * 19 + [60.0]:
        margin.observe(duration)
    assert margin.p95_s() == 1.0  # one slow rollout in 20 is beyond the p95
    assert margin.check() is None
    near = DrainMargin(Deadline(time.time() + 10, "test"))
    for _ in range(20):
        near.observe(10 / MARGIN_FACTOR + 1)  # 10 s left hold a rollout of 8.0 s, not one of 9.0 s with the margin
    reason = near.check()
    assert reason is not None and "too few for a rollout (p95 of the last 20: 9.0 s, and a quarter more)" in reason
    assert "has passed" in (DrainMargin(Deadline(time.time() - 1, "test")).check() or "")


def _fake_squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    script = tmp_path / "bin" / "squeue"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")


def test_slurm_end_time_and_each_squeue_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_squeue(tmp_path, monkeypatch, 'echo "2030-01-02T03:04:05"')
    found = find_deadline(None, 60)
    assert found is not None and found.at == datetime(2030, 1, 2, 3, 4, 5).timestamp() - 60
    assert found.source == "Slurm job 4242's end time, 03:04:05"
    # An array task asks for itself: its SLURM_JOB_ID may be the array's, which squeue answers for every task.
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    _fake_squeue(tmp_path, monkeypatch, f'echo "$@" > {tmp_path}/asked; echo 2030-01-02T03:04:05; echo NONE')
    found = find_deadline(None, 0)
    assert found is not None and found.source.startswith("Slurm job 4242_3's end time")
    assert "--jobs 4242_3" in (tmp_path / "asked").read_text()
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID")
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    _fake_squeue(tmp_path, monkeypatch, "echo UNLIMITED")
    assert find_deadline(None, 60) is None  # a job without a time limit has no deadline
    _fake_squeue(tmp_path, monkeypatch, "echo 'slurm_load_jobs error: Invalid job id' >&2; exit 1")
    with pytest.raises(DownstreamError, match="cannot ask Slurm when job 4242 ends .*Invalid job id.*deadline=off"):
        find_deadline(None, 60)
    _fake_squeue(tmp_path, monkeypatch, "echo soon")
    with pytest.raises(DownstreamError, match="end time as 'soon', which is not a time"):
        find_deadline(None, 60)
    monkeypatch.setattr(deadline_module, "SQUEUE_TIMEOUT_S", 0.5)
    _fake_squeue(tmp_path, monkeypatch, "exec sleep 60")
    started = time.monotonic()
    with pytest.raises(DownstreamError, match="cannot ask Slurm when job 4242 ends .*timed out"):
        find_deadline(None, 60)
    assert time.monotonic() - started < 30
    assert find_deadline("off", 60) is None  # and +deadline=off asks nobody


def _collect(stack: CollectionStack, tmp_path: Path, agent: str, *extra: str):
    write_rows(tmp_path / "in.jsonl", ROWS)
    return run_cli("collect", stack.args(
        f"+agent_name={agent}", f"+input_jsonl_fpath={tmp_path}/in.jsonl", f"+output_jsonl_fpath={tmp_path}/r.jsonl",
        f"+num_samples_in_parallel={IN_FLIGHT}", "+adaptive_concurrency=false", *extra), tmp_path)


def test_a_run_drains_before_its_deadline_and_a_resume_completes_it(collection_stack: CollectionStack,
                                                                     tmp_path: Path) -> None:
    output = tmp_path / "r.jsonl"
    # 4 s hold at most 4 / PACED_S * IN_FLIGHT = 32 of the 40 rollouts: the deadline comes first, by construction.
    drained = _collect(collection_stack, tmp_path, "paced_agent", "+deadline=4s")
    assert drained.returncode == EXIT_DEADLINE, drained.stdout + drained.stderr
    assert "stopped starting rollouts: " in drained.stdout and "too few for a rollout (p95 of the last" in drained.stdout
    done = keys(output)
    assert 0 < len(done) < ROWS and len(set(done)) == len(done)
    progress = orjson.loads(sidecar(output, "_progress.json").read_bytes())
    assert progress["state"] == "stopped" and progress["message"].startswith("stopped starting rollouts: ")
    # The metrics describe the output as it stands, as after failed rollouts.
    (metrics,) = orjson.loads(sidecar(output, "_aggregate_metrics.json").read_bytes())
    assert metrics["agent_metrics"]["num_rollouts"] == len(done)

    resumed = _collect(collection_stack, tmp_path, "paced_agent", "+resume_from_cache=true", "+deadline=off")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert sorted(keys(output)) == [(task, 0) for task in range(ROWS)]
    assert all(row["reward"] == task % 2 for task, row in ((r["_ng_task_index"], r) for r in read_rows(output)))


def test_rollouts_running_at_the_deadline_are_stopped_there(collection_stack: CollectionStack,
                                                            tmp_path: Path) -> None:
    started = time.monotonic()
    # 15 s: time for a loaded machine to start the collector and its first rollouts (2 s was not, with the suite's
    # sessions side by side); the agent would hold them 120 s.
    stuck = _collect(collection_stack, tmp_path, "stuck_agent", "+deadline=15s")
    # Bounded by the deadline, not by the agent's 120 s: what ran is stopped, nothing is recorded for it.
    assert time.monotonic() - started < 60
    assert stuck.returncode == EXIT_DOWNSTREAM, stuck.stdout + stuck.stderr  # no progress: a requeue would loop
    assert f"{IN_FLIGHT} still running at the deadline were stopped there" in stuck.stdout
    assert "no rollout finished before the deadline" in stuck.stdout
    assert not (tmp_path / "r.jsonl").read_bytes()
    assert not sidecar(tmp_path / "r.jsonl", "_failures.jsonl").exists() or \
        not sidecar(tmp_path / "r.jsonl", "_failures.jsonl").read_bytes()


def test_an_unreadable_slurm_end_time_warns_and_the_run_goes_on(collection_stack: CollectionStack, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_squeue(tmp_path, monkeypatch, "echo 'slurm_load_jobs error: Socket timed out' >&2; exit 1")
    ran = _collect(collection_stack, tmp_path, "agent_a")  # the subprocess inherits the fake squeue and job id
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "warning: no drain margin before the job's end: cannot ask Slurm when job 4242 ends" in ran.stderr
    assert len(keys(tmp_path / "r.jsonl")) == ROWS
