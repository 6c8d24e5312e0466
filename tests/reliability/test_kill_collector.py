"""kill -9 of the collector at 20 seeded random points across consecutive runs: every key ends up exactly once.

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

from tests.collection.util import cli, keys, read_rows, run_cli, sidecar
from tests.reliability.conftest import ReliabilityStack, write_weather_rows

ROWS, REPEATS, KILLS = 1000, 2, 20


def _committed_keys(out: Path) -> Counter:
    """Keys of the whole lines of `out` (a kill may tear the last one, which resume trims)."""
    if not out.exists():
        return Counter()
    content = out.read_bytes()
    lines = content[: content.rfind(b"\n") + 1].splitlines()
    return Counter((row["_ng_task_index"], row["_ng_rollout_index"]) for row in map(orjson.loads, lines))


@pytest.mark.timeout(150)
def test_kill_9_at_20_random_points_then_resume_gives_every_key_once(
        faults_off: ReliabilityStack, tmp_path: Path) -> None:
    write_weather_rows(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "out" / "r.jsonl"
    args = faults_off.args(f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={out}",
                           f"+num_repeats={REPEATS}", "+resume_from_cache=true")
    rng = random.Random(20)
    committed_at_kill: list[int] = []
    torn = 0
    started = time.monotonic()
    for _ in range(KILLS):
        # One rollout at a time keeps each run short of the finish line, so every kill lands before the end.
        proc = subprocess.Popen(cli("collect", [*args, "+num_samples_in_parallel=1"]), cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.2, 0.9))  # during start-up: config, validation, resume scan
        else:
            # Start-up time varies a lot on a busy 2-core machine; time the kill from when rollouts start.
            while not (line := proc.stdout.readline()).startswith(b"collecting") and line:
                pass
            time.sleep(rng.uniform(0.0, 0.6))
        assert proc.poll() is None, f"the collector ended before its kill: {proc.stdout.read().decode()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        counts = _committed_keys(out)
        assert max(counts.values(), default=1) == 1, "a key was written twice"
        committed_at_kill.append(sum(counts.values()))
        torn += out.exists() and not out.read_bytes().endswith(b"\n")
    kills_s = time.monotonic() - started
    print(f"{KILLS} kills in {kills_s:.1f} s; committed rollouts at each kill {committed_at_kill}; torn tails {torn}")
    assert len(set(committed_at_kill)) >= KILLS // 2, f"kills should land at different points: {committed_at_kill}"

    final = run_cli("collect", [*args, "+num_samples_in_parallel=32"], tmp_path, timeout=120)
    assert final.returncode == 0, final.stdout + final.stderr
    assert sorted(keys(out)) == [(t, r) for t in range(ROWS) for r in range(REPEATS)]
    assert all(row["reward"] == 1.0 for row in read_rows(out))
    assert not sidecar(out, "_failures.jsonl").exists()
