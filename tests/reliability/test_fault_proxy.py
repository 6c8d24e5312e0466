"""Faults between the model server and the model, on 10% of requests, through the real agent and environment."""

import time
from collections import Counter
from pathlib import Path

import pytest

from nemo_gym.http_client import FAILURE_CLASSES
from tests.collection.util import keys, read_rows, run_cli, sidecar
from tests.reliability.apps.fault_proxy import FAULTS
from tests.reliability.conftest import ReliabilityStack, write_weather_rows

ROWS = 300
FAULT_RATE = 0.10


@pytest.mark.timeout(150)
def test_run_completes_under_injected_faults_and_resume_finishes_exactly_once(
        faults_off: ReliabilityStack, tmp_path: Path) -> None:
    write_weather_rows(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "r.jsonl"
    failures_path = sidecar(out, "_failures.jsonl")
    # One attempt per rollout and a deadline shorter than the model server's 2 s read timeout: a hang the model
    # server would retry past becomes a recorded rollout failure, so the failure path is exercised every run.
    args = faults_off.args(f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={out}",
                           "+num_samples_in_parallel=32", "+max_attempts=1", "+rollout_timeout_s=1.5")
    proxy = faults_off.proxy
    before, requests_before = Counter(proxy.injected), proxy.requests
    proxy.rate = FAULT_RATE
    started = time.monotonic()
    first = run_cli("collect", args, tmp_path, timeout=120)
    elapsed = time.monotonic() - started
    proxy.rate = 0.0
    injected = proxy.injected - before
    requests = proxy.requests - requests_before
    print(f"faulted run: {elapsed:.1f} s, {requests} model requests, injected {dict(injected)}")
    assert first.returncode in (0, 1), first.stdout + first.stderr
    assert set(injected) == set(FAULTS), injected
    assert 0.05 < sum(injected.values()) / requests < 0.15

    everything = {(t, 0) for t in range(ROWS)}
    succeeded = keys(out)
    failures = read_rows(failures_path) if failures_path.exists() else []
    failed = [(f["_ng_task_index"], f["_ng_rollout_index"]) for f in failures]
    print(f"succeeded {len(succeeded)}, failed {Counter(f['failure_class'] for f in failures)}")
    assert failed, "no rollout failed: the failure path was not exercised"
    assert len(set(succeeded)) == len(succeeded) and len(set(failed)) == len(failed)
    assert set(succeeded).isdisjoint(failed) and set(succeeded) | set(failed) == everything
    assert all(row["reward"] == 1.0 for row in read_rows(out))
    for failure in failures:
        assert failure["failure_class"] in FAILURE_CLASSES and failure["attempts"] == 1, failure
        assert failure["last_error"] and "reward" not in failure and "response" not in failure
    assert first.returncode == 1 and f"FAILED: {len(failed)} rollouts" in first.stdout

    resumed = run_cli("collect", [*args, "+resume_from_cache=true"], tmp_path, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{len(failed)} failed ones will be retried" in resumed.stdout
    final = keys(out)
    assert len(final) == ROWS and set(final) == everything
    assert all(row["reward"] == 1.0 for row in read_rows(out)) and not failures_path.exists()
