"""kill -9 of the collector at 12 seeded points across consecutive runs at 64 concurrent: every key ends up exactly
once, and torn last lines left by kills that landed inside a write are repaired by the next run.

Every 16th row carries a 4 MiB field that its output line repeats, so that line is one `write` long enough to be cut:
some kills are timed to land while the output's last line is still being written (the file does not end in a
newline), and the test asserts that such torn tails really were produced and that the next run repaired each one.
This is the long version of tests/collection/test_resume.py's 6-point test, against the real agent and environment.
"""

import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests.collection.util import cli, read_rows, run_cli, sidecar
from tests.reliability.conftest import ReliabilityStack, write_weather_rows

ROWS, KILLS, PARALLEL = 240, 12, 64
PADDING, PADDED_EVERY = 4 << 20, 16
WHEN = ("start-up", "running", "mid-write")


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


def _wait_for_started_write(out: Path, proc: subprocess.Popen, timeout_s: float) -> None:
    """Return as soon as the output's last line is incomplete (a write in progress), or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    if not out.exists():
        return
    fd = os.open(out, os.O_RDONLY)
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                return
    finally:
        os.close(fd)


def _wait_for_collecting(proc: subprocess.Popen) -> list[bytes]:
    """Lines the collector printed up to its `collecting` line (start-up time varies a lot on a busy machine)."""
    lines = []
    while (line := proc.stdout.readline()) and not line.startswith(b"collecting"):
        lines.append(line)
    return [*lines, line]


@pytest.mark.timeout(600)
def test_kill_9_at_12_points_at_64_concurrent_repairs_torn_tails_and_resume_gives_every_key_once(
        faults_off: ReliabilityStack, tmp_path: Path) -> None:
    write_weather_rows(tmp_path / "in.jsonl", ROWS, padding=PADDING, padded_every=PADDED_EVERY)
    out = tmp_path / "out" / "r.jsonl"
    args = faults_off.args(f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={out}",
                           f"+num_samples_in_parallel={PARALLEL}", "+resume_from_cache=true")
    rng = random.Random(20)
    committed_at_kill: list[int] = []
    torn_at_kill: list[bool] = []
    repaired: list[bool] = []  # for each run that got past its resume scan: whether it repaired a torn tail
    started = time.monotonic()
    for kill in range(KILLS):
        torn_before = _torn(out)
        proc = subprocess.Popen(cli("collect", args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        when = WHEN[kill % 3]
        printed = []
        if when == "start-up":
            time.sleep(rng.uniform(0.2, 0.9))  # config, validation, resume scan
        elif when == "running":
            # Timed by progress, not by the clock: how fast rollouts finish varies a lot on a busy 2-core machine.
            printed = _wait_for_collecting(proc)
            tail = _Tail(out)  # after `collecting`: the run has repaired any torn tail by then
            tail.poll()
            tail.wait_for_lines(tail.lines + rng.randint(1, 16), proc, timeout_s=60)
        else:
            printed = _wait_for_collecting(proc)
            _wait_for_started_write(out, proc, timeout_s=30)
        assert proc.poll() is None, f"the collector ended before its kill: {proc.stdout.read().decode()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        printed += proc.stdout.read().splitlines(keepends=True)
        proc.stdout.close()
        if any(line.startswith(b"collecting") for line in printed):
            repaired.append(any(line.startswith(b"repaired") for line in printed))
            assert repaired[-1] == torn_before, f"run {kill} started from a torn tail: {torn_before}; {printed}"
        counts = _committed_keys(out)
        assert max(counts.values(), default=1) == 1, "a key was written twice"
        committed_at_kill.append(sum(counts.values()))
        torn_at_kill.append(_torn(out))
    kills_s = time.monotonic() - started
    print(f"{KILLS} kills in {kills_s:.1f} s; committed rollouts at each kill {committed_at_kill}; "
          f"torn tails left by kills {sum(torn_at_kill)} (after kills {[i for i, t in enumerate(torn_at_kill) if t]}); "
          f"runs that repaired one {sum(repaired)}")
    last_lines = b"".join(printed[-3:]).decode(errors="replace")
    assert len(set(committed_at_kill)) >= KILLS // 2, f"kills should land at different points: {committed_at_kill}; " \
                                                      f"the last run printed: {last_lines}"
    assert committed_at_kill[-1] < ROWS, "the runs finished before the last kill: raise ROWS"
    assert sum(torn_at_kill) >= 1, "no kill landed inside a write: the torn-tail repair was not exercised"
    assert sum(repaired) >= 1

    final = run_cli("collect", args, tmp_path, timeout=180)
    assert final.returncode == 0, final.stdout + final.stderr
    assert ("repaired" in final.stdout) == torn_at_kill[-1]
    rows = read_rows(out)
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows) == [(t, 0) for t in range(ROWS)]
    assert all(row["reward"] == 1.0 for row in rows)
    assert all(len(r["padding"]) == PADDING for r in rows if r["_ng_task_index"] % PADDED_EVERY == 0)
    assert not sidecar(out, "_failures.jsonl").exists()
