"""SIGTERM to the collector mid-run (scancel, preemption): it stops cleanly with exit code 130, leaves only whole
lines, and a resume completes every key exactly once."""

import signal
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.collection.util import cli, keys, read_rows, run_cli, sidecar
from tests.reliability.conftest import ReliabilityStack, line_count, sha256, wait_for_lines, write_weather_rows

ROWS = 2000


@pytest.mark.timeout(120)
def test_sigterm_flushes_exits_130_and_resume_completes_exactly_once(
        faults_off: ReliabilityStack, tmp_path: Path) -> None:
    write_weather_rows(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "r.jsonl"
    args = faults_off.args(f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={out}",
                           "+num_samples_in_parallel=16")
    proc = subprocess.Popen(cli("collect", args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wait_for_lines(out, 200, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr and stderr.strip().endswith("interrupted"), stderr
    assert "stopped: every finished rollout is saved" in stdout
    content = out.read_bytes()
    assert content.endswith(b"\n"), "torn last line after SIGTERM"
    rows = [orjson.loads(line) for line in content.splitlines()]
    stopped_at = len(rows)
    assert 200 <= stopped_at < ROWS
    assert len(set(keys(out))) == stopped_at and all(row["reward"] == 1.0 for row in rows)
    failures = sidecar(out, "_failures.jsonl")
    assert line_count(failures) == 0  # cancelled rollouts are still pending, not failed
    materialized = sidecar(out, "_materialized_inputs.jsonl")
    assert line_count(materialized) == ROWS
    assert {p.name for p in tmp_path.iterdir()} <= {
        "in.jsonl", out.name, materialized.name, failures.name, sidecar(out, "_manifest.json").name,
        sidecar(out, "_collect.log").name, sidecar(out, "_progress.json").name,
        sidecar(out, "_replay.jsonl").name}  # the finished model calls of the rollouts the stop cut
    assert "interrupted" in sidecar(out, "_collect.log").read_text()  # the collector's own log says how it ended
    assert orjson.loads(sidecar(out, "_progress.json").read_bytes())["state"] == "interrupted"  # and its progress
    materialized_sha = sha256(materialized)

    resumed = run_cli("collect", [*args, "+resume_from_cache=true"], tmp_path, timeout=90)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming: {stopped_at} rollouts already in" in resumed.stdout
    print(f"SIGTERM after {stopped_at} of {ROWS} rollouts; resume collected the other {ROWS - stopped_at}")
    assert sorted(keys(out)) == [(t, 0) for t in range(ROWS)]
    assert all(row["reward"] == 1.0 for row in read_rows(out))
    assert sha256(materialized) == materialized_sha
