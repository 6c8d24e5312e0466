"""Crash safety: kill -9 the collector anywhere, resume, and get every key exactly once; refuse a changed run."""

import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import orjson

from tests.collection.conftest import CollectionStack
from tests.collection.util import cli, keys, read_rows, run_cli, sidecar, write_rows

ROWS, REPEATS = 600, 2


def _args(stack: CollectionStack, tmp_path: Path, *extra: str) -> list[str]:
    return stack.args("+agent_name=slow_agent", f"+input_jsonl_fpath={tmp_path}/in.jsonl",
                      f"+output_jsonl_fpath={tmp_path}/out/r.jsonl", f"+num_repeats={REPEATS}",
                      "+num_samples_in_parallel=8", *extra)


def _assert_no_duplicates(out: Path) -> None:
    counts = Counter(keys(out))
    assert not [k for k, n in counts.items() if n > 1]


def test_kill_9_at_random_points_then_resume_gives_every_key_once(
        collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "out" / "r.jsonl"
    rng = random.Random(1234)
    kills = 0
    lines_at_kill = []
    for attempt in range(6):
        lines_before = out.read_bytes().count(b"\n") if out.exists() else 0
        proc = subprocess.Popen(cli("collect", _args(collection_stack, tmp_path, "+resume_from_cache=true")),
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if attempt % 2:
            time.sleep(rng.uniform(0.1, 1.0))  # most likely during start-up: config, validation, resume scan
        else:
            # Mid-run, however long a loaded machine takes to start: once this run has committed a rollout.
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline and (
                    not out.exists() or out.read_bytes().count(b"\n") <= lines_before):
                time.sleep(0.02)
            assert out.exists() and out.read_bytes().count(b"\n") > lines_before, \
                f"run {attempt} committed no rollout within 120 s"
            time.sleep(rng.uniform(0.0, 0.4))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        if out.exists():
            lines_at_kill.append(out.read_bytes().count(b"\n"))
            # A kill may land mid-line; everything before the last newline must be whole rollouts, once each.
            complete = out.read_bytes()[: out.read_bytes().rfind(b"\n") + 1]
            counts = Counter((r["_ng_task_index"], r["_ng_rollout_index"])
                             for r in map(orjson.loads, complete.splitlines()))
            assert max(counts.values(), default=1) == 1
    assert kills >= 5, f"the run finished before enough kills ({kills})"
    assert len(set(lines_at_kill)) >= 3, f"kills should land at different points: {lines_at_kill}"
    final = run_cli("collect", _args(collection_stack, tmp_path, "+resume_from_cache=true"), tmp_path)
    assert final.returncode == 0, final.stdout + final.stderr
    assert sorted(keys(out)) == [(t, r) for t in range(ROWS) for r in range(REPEATS)]
    _assert_no_duplicates(out)
    assert all(row["reward"] == float((row["_ng_task_index"] + row["_ng_rollout_index"]) % 2) for row in read_rows(out))
    metrics = orjson.loads(sidecar(out, "_aggregate_metrics.json").read_bytes())
    assert metrics[0]["agent_metrics"]["num_rollouts"] == ROWS * REPEATS


def test_torn_last_line_is_repaired_on_resume(collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", 20)
    out = tmp_path / "out" / "r.jsonl"
    first = run_cli("collect", _args(collection_stack, tmp_path, "+limit=10"), tmp_path)
    assert first.returncode == 0, first.stderr
    content = out.read_bytes()
    torn = content[: content.rfind(b"\n", 0, len(content) - 1) + 1] + b'{"_ng_task_index": 9, "_ng_roll'
    out.write_bytes(torn)
    resumed = run_cli("collect", _args(collection_stack, tmp_path, "+limit=10", "+resume_from_cache=true"), tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "dropped a torn last line" in resumed.stdout
    assert "resuming: 19 rollouts already in" in resumed.stdout and "1 rollouts collected" in resumed.stdout
    assert sorted(keys(out)) == [(t, r) for t in range(10) for r in range(REPEATS)]


def test_changed_config_is_refused_unless_explicitly_allowed(
        collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", 8)
    out = tmp_path / "out" / "r.jsonl"
    assert run_cli("collect", _args(collection_stack, tmp_path, "+limit=4"), tmp_path).returncode == 0
    before = out.read_bytes()
    write_rows(tmp_path / "in.jsonl", 8, extra_field="changed")
    refused = run_cli("collect", _args(collection_stack, tmp_path, "+limit=6", "+resume_from_cache=true",
                                       "+responses_create_params={temperature: 0.1}"), tmp_path)
    assert refused.returncode == 2
    message = refused.stderr
    assert "refusing to resume" in message and "resume_ignore_config_change=true" in message
    for field in ("input_sha256", "limit: 4 -> 6", "responses_create_params: {} -> {'temperature': 0.1}"):
        assert field in message, field
    assert "num_repeats" not in message and out.read_bytes() == before
    accepted = run_cli("collect", _args(collection_stack, tmp_path, "+limit=6", "+resume_from_cache=true",
                                        "+responses_create_params={temperature: 0.1}",
                                        "+resume_ignore_config_change=true"), tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    assert "warning: resuming despite config changes" in accepted.stderr
    assert sorted(keys(out)) == [(t, r) for t in range(6) for r in range(REPEATS)]
    rows = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in read_rows(out)}
    assert "extra_field" not in rows[(0, 0)] and rows[(5, 0)]["extra_field"] == "changed"


def test_resume_without_an_output_starts_fresh(collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", 3)
    result = run_cli("collect", _args(collection_stack, tmp_path, "+resume_from_cache=true"), tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(keys(tmp_path / "out" / "r.jsonl")) == 3 * REPEATS
