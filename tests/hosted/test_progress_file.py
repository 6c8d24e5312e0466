"""The progress file is replaced in one step: a writer killed with SIGKILL at any point of a replacement leaves the
old version or the new one, complete. The points are made to happen by construction: the writer, in a child
process, is stopped (not slowed) halfway through writing its temporary file, before the rename, and after it; only
then is it killed. The next writer removes what a killed one left. ng_status reads the file and says whether the run
is alive."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from nemo_gym.rollout_collection.progress_file import (
    FINISHED,
    INTERVAL_S,
    RUNNING,
    STALE_INTERVALS,
    read_progress,
    remove_stale_temporaries,
    write_progress,
)
from tests.helpers.stack import REPO_ROOT

WRITER = """
import os, sys, time
from pathlib import Path
from nemo_gym.rollout_collection import progress_file

path, point = Path(sys.argv[1]), sys.argv[2]
progress_file.write_progress(path, {"state": "running", "done": 1, "padding": "x" * 100000})
real_write, real_replace = os.write, os.replace

def stop_here(marker):
    print(marker, flush=True)
    time.sleep(600)  # killed here

def half_then_stop(fd, data):
    real_write(fd, bytes(data[: len(data) // 2]))
    stop_here("half written")

def stop_before(src, dst):
    stop_here("written, not renamed")

def stop_after(src, dst):
    real_replace(src, dst)
    stop_here("renamed")

os.write, os.replace = {"mid_write": (half_then_stop, real_replace), "before_rename": (real_write, stop_before),
                        "after_rename": (real_write, stop_after)}[point]
progress_file.write_progress(path, {"state": "running", "done": 2, "padding": "y" * 100000})
"""


def _kill_writer_at(point: str, path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path), point], stdout=subprocess.PIPE, text=True,
                             cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        marker = child.stdout.readline().strip()  # type: ignore[union-attr]  # the writer is stopped at `point`
        assert marker in ("half written", "written, not renamed", "renamed"), marker
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)


@pytest.mark.parametrize("point, version", [("mid_write", 1), ("before_rename", 1), ("after_rename", 2)])
def test_kill_9_during_a_replacement_leaves_one_complete_version(tmp_path: Path, point: str, version: int) -> None:
    path = tmp_path / "run_progress.json"
    _kill_writer_at(point, path)
    snapshot = read_progress(path)  # parses: complete
    assert snapshot["done"] == version and len(snapshot["padding"]) == 100000
    leftovers = list(tmp_path.glob(".run_progress.json.*.tmp"))
    assert len(leftovers) == (0 if point == "after_rename" else 1)
    remove_stale_temporaries(path)  # what the next run's writer does first
    assert not list(tmp_path.glob(".run_progress.json.*.tmp"))
    assert read_progress(path)["done"] == version


def _ng_status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from nemo_gym.cli.status import main; main()", *args],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def _snapshot(state: str, age_s: float, failed: int = 0) -> dict[str, object]:
    return {"state": state, "output": "/runs/r.jsonl", "updated_at": time.time() - age_s, "total": 10, "done": 4,
            "done_before": 1, "failed": failed, "in_flight": 3, "rate_per_s": 1.5, "eta_s": 4.0,
            "concurrency": {"level": 3, "ceiling": 8}, "rate_limited": 2,
            "retries": {"rollouts": 1, "model_calls": 2, "refused": 0},
            "agents": {"a": {"succeeded": 3, "failed": failed, "in_flight": 3, "rate_limited": 2}}}


def test_ng_status_reads_a_running_run(tmp_path: Path) -> None:
    write_progress(tmp_path / "r_progress.json", _snapshot(RUNNING, 0))
    result = _ng_status(f"+output_jsonl_fpath={tmp_path / 'r.jsonl'}")
    assert result.returncode == 0, result.stderr
    assert "done: 4/10 (1 before this run), failed 0, in flight 3 (level 3 of 8)" in result.stdout
    assert "429s 2" in result.stdout and "  a: 3 succeeded" in result.stdout


def test_ng_status_says_a_silent_collector_is_gone(tmp_path: Path) -> None:
    write_progress(tmp_path / "r_progress.json", _snapshot(RUNNING, STALE_INTERVALS * INTERVAL_S + 5))
    result = _ng_status(f"+output_jsonl_fpath={tmp_path / 'r.jsonl'}")
    assert result.returncode == 1 and f"(pid {os.getpid()} on " in result.stdout and "is gone" in result.stdout


def test_ng_status_exit_status_of_a_finished_run(tmp_path: Path) -> None:
    write_progress(tmp_path / "ok_progress.json", _snapshot(FINISHED, 600))
    write_progress(tmp_path / "bad_progress.json", _snapshot(FINISHED, 600, failed=2))
    assert _ng_status(f"+output_jsonl_fpath={tmp_path / 'ok.jsonl'}").returncode == 0
    assert _ng_status(f"+output_jsonl_fpath={tmp_path / 'bad.jsonl'}").returncode == 1


def test_ng_status_without_a_progress_file_is_bad_input(tmp_path: Path) -> None:
    result = _ng_status(f"+output_jsonl_fpath={tmp_path / 'never.jsonl'}")
    assert result.returncode == 2 and result.stderr.startswith("error: no progress file ")
    (tmp_path / "junk_progress.json").write_bytes(orjson.dumps({"something": "else"}))
    assert _ng_status(f"+output_jsonl_fpath={tmp_path / 'junk.jsonl'}").returncode == 2
