"""kill -9 of the collector at 12 points across consecutive runs at 64 concurrent: every key ends up exactly once,
and every torn last line a kill leaves is repaired by the next run that gets past its resume scan.

The kills are of three kinds, each timed by state, not by the clock:
- start-up: a random moment early in the run, wherever it lands (config, validation, resume scan, first rollouts);
- running: after the run has committed 1-16 more lines;
- mid-write: while a line is only partly on disk. Every 16th row carries a 4 MiB field that its output line repeats,
  so that line takes milliseconds to write; tests/helpers/tear.py watches the file from the collector's own CPU
  under SCHED_FIFO and sends the SIGKILL while the collector cannot run, so every mid-write kill tears the file.
A mid-write kill is always followed by a run that waits for `collecting` (so it must have repaired the tail), and
the last kill is a mid-write one, so the final, uninterrupted run repairs one too.
This is the long version of tests/collection/test_resume.py's 6-point test, against the real agent and environment.
"""

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests.collection.util import cli, read_rows, run_cli, sidecar
from tests.helpers.tear import NOTHING_TO_TEAR, TORN, pin_to_tear_cpu
from tests.reliability.conftest import ReliabilityStack, write_weather_rows

ROWS, PARALLEL = 400, 64
PADDING, PADDED_EVERY = 4 << 20, 16
# Each mid-write kill is followed by a running or mid-write kill, or by the final run: all wait for `collecting`.
KILL_PLAN = ("start-up", "mid-write", "running") * 3 + ("start-up", "mid-write", "mid-write")


def _committed_keys(out: Path) -> Counter:
    """Keys of the whole lines of `out` (a kill may tear the last one, which resume trims)."""
    if not out.exists():
        return Counter()
    content = out.read_bytes()
    lines = content[: content.rfind(b"\n") + 1].splitlines()
    return Counter((row["_ng_task_index"], row["_ng_rollout_index"]) for row in map(orjson.loads, lines))


def _torn(out: Path) -> bool:
    return out.exists() and out.stat().st_size > 0 and not out.read_bytes().endswith(b"\n")


class _Tail:
    """Follows the output as it grows, counting its lines without rereading it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = 0
        self._offset = 0
        self.last_byte = b"\n"

    def poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb") as file:
            file.seek(self._offset)
            chunk = file.read()
        if chunk:
            self.lines += chunk.count(b"\n")
            self._offset += len(chunk)
            self.last_byte = chunk[-1:]

    def wait_for_lines(self, n: int, proc: subprocess.Popen, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.lines < n and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
            self.poll()


def _wait_for_collecting(proc: subprocess.Popen) -> list[bytes]:
    """Lines the collector printed up to its `collecting` line (start-up time varies a lot on a busy machine)."""
    lines = []
    while (line := proc.stdout.readline()) and not line.startswith(b"collecting"):
        lines.append(line)
    return [*lines, line]


def _kill_mid_write(proc: subprocess.Popen, out: Path) -> None:
    watcher = subprocess.run([sys.executable, "-m", "tests.helpers.tear", str(proc.pid), str(out), "120"],
                             cwd=Path(__file__).parents[2], timeout=180)
    assert watcher.returncode != NOTHING_TO_TEAR, "no line was being written within 120 s (or the collector ended)"
    assert watcher.returncode == TORN, f"the tear watcher failed: exit {watcher.returncode}"


@pytest.mark.timeout(900)
def test_kill_9_at_12_points_at_64_concurrent_repairs_every_torn_tail_and_resume_gives_every_key_once(
        faults_off: ReliabilityStack, tmp_path: Path) -> None:
    write_weather_rows(tmp_path / "in.jsonl", ROWS, padding=PADDING, padded_every=PADDED_EVERY)
    out = tmp_path / "out" / "r.jsonl"
    args = faults_off.args(f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={out}",
                           f"+num_samples_in_parallel={PARALLEL}", "+resume_from_cache=true")
    rng = random.Random(20)
    committed_at_kill: list[int] = []
    torn_at_kill: list[bool] = []
    started = time.monotonic()
    for kill, when in enumerate(KILL_PLAN):
        torn_before = _torn(out)
        before = sum(_committed_keys(out).values())
        proc = subprocess.Popen(cli("collect", args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=pin_to_tear_cpu() if when == "mid-write" else None)
        printed = []
        if when == "start-up":
            time.sleep(rng.uniform(0.2, 0.9))
        else:
            printed = _wait_for_collecting(proc)
            assert printed[-1].startswith(b"collecting"), f"run {kill} ended before collecting: {printed}"
        if when == "running":
            tail = _Tail(out)
            tail.poll()
            target = tail.lines + rng.randint(1, 16)
            tail.wait_for_lines(target, proc, timeout_s=120)
            assert tail.lines >= target, f"run {kill} committed {tail.lines} of {target} lines before its kill"
        if when == "mid-write":
            _kill_mid_write(proc, out)
        else:
            assert proc.poll() is None, f"the collector ended before its kill: {proc.stdout.read().decode()}"
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        printed += proc.stdout.read().splitlines(keepends=True)
        proc.stdout.close()
        if any(line.startswith(b"collecting") for line in printed):
            # No run collects from a torn tail: `collecting` comes after the resume scan's repair.
            assert any(line.startswith(b"repaired") for line in printed) == torn_before, \
                f"run {kill} started from a torn tail ({torn_before}) without repairing it, or repaired none: {printed}"
        counts = _committed_keys(out)
        assert max(counts.values(), default=1) == 1, "a key was written twice"
        committed_at_kill.append(sum(counts.values()))
        torn_at_kill.append(_torn(out))
        if when == "mid-write":
            assert torn_at_kill[-1], f"the mid-write kill {kill} left a whole last line"
        if when == "running":
            assert committed_at_kill[-1] > before, f"run {kill} was killed before it committed a line"
    kills_s = time.monotonic() - started
    print(f"{len(KILL_PLAN)} kills in {kills_s:.1f} s; committed rollouts at each kill {committed_at_kill}; "
          f"torn tails left by kills {[i for i, t in enumerate(torn_at_kill) if t]}")
    assert committed_at_kill[-1] < ROWS, "the runs finished before the last kill: raise ROWS"

    final = run_cli("collect", args, tmp_path, timeout=300)
    assert final.returncode == 0, final.stdout + final.stderr
    assert "repaired" in final.stdout, "the last kill tore the output, so the final run must repair it"
    rows = read_rows(out)
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows) == [(t, 0) for t in range(ROWS)]
    assert all(row["reward"] == 1.0 for row in rows)
    assert all(len(r["padding"]) == PADDING for r in rows if r["_ng_task_index"] % PADDED_EVERY == 0)
    assert not sidecar(out, "_failures.jsonl").exists()
