"""Collecting from a rate-limited hosted API (the loopback stub): configured limits are kept by the model server
for all its workers, a 429 is waited out and recorded (the model server paces the endpoint, so the run's
concurrency stays), a 429 the model server could not absorb fails the rollout as rate_limited and cuts the
concurrency, and every model call's record reaches the row, the metrics, the report and the progress file."""

import re
from pathlib import Path

import orjson

from benchmarks.perf.harness import write_rows
from nemo_gym.rollout_collection.concurrency import DECREASE
from nemo_gym.run_files.metrics_file import read_metrics
from tests.collection.util import read_rows, run_cli, sidecar
from tests.hosted.conftest import AGENT, LIMITED_AGENT, STRICT_AGENT, STUB_MODEL, HostedStack

CUT = re.compile(r"concurrency (\d+) -> (\d+) \(ceiling 64\): a rollout met \d+ 429s")


def _collect(stack: HostedStack, agent: str, tmp_path: Path, rows: int, *extra: str,
             exit_status: tuple[int, ...] = (0,)) -> tuple[str, Path]:
    inputs = write_rows(tmp_path / "in.jsonl", rows, max_output_tokens=16)
    output = tmp_path / "out.jsonl"
    result = run_cli("collect", stack.args(agent, f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={output}",
                                           *extra), tmp_path, timeout=300)
    assert result.returncode in exit_status, result.stdout + result.stderr
    return result.stdout, output


def _deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before.get(key, 0) for key in after}


def test_configured_limits_hold_and_every_call_is_recorded(hosted_stack: HostedStack, tmp_path: Path) -> None:
    before = hosted_stack.stats()
    stdout, output = _collect(hosted_stack, LIMITED_AGENT, tmp_path, 20, "+num_samples_in_parallel=16")
    seen = _deltas(before, hosted_stack.stats())
    # The model server's two workers together keep to max_requests_per_minute, the stub's own limit: no 429.
    assert seen["completed"] == 40 and seen["rate_limited"] == 0, seen
    assert f"preflight: model endpoint {hosted_stack.stub_url} (model server 'limited_model') serves " \
           f"'{STUB_MODEL}', context 8192 tokens" in stdout

    rows = read_rows(output)
    calls = [call for row in rows for call in row["_ng_model_calls"]]
    assert len(rows) == 20 and all(len(row["_ng_model_calls"]) == 2 for row in rows)
    assert {(c["endpoint"], c["model"], c["attempts"], c["rate_limited"], c["output_tokens"]) for c in calls} == \
        {(hosted_stack.stub_url, STUB_MODEL, 1, 0, 10)}
    assert all(c["latency_s"] > 0 and c["input_tokens"] > 0 for c in calls)
    # 16 rollouts asked at once, and the limit lets only a burst through: the others waited in the model server.
    assert sum(1 for c in calls if c["wait_s"] > 0.05) >= 8
    assert all("_ng_model_call" not in row["response"] for row in rows)  # the record left the model's reply

    metrics = read_metrics(sidecar(output, "_aggregate_metrics.json"))[0]["agent_metrics"]
    assert metrics["model_calls/count"] == 40 and metrics["model_calls/per_rollout"] == 2
    assert metrics["model_calls/rate_limited"] == 0 and metrics["model_calls/output_tokens"] == 400
    assert 0 < metrics["model_calls/latency_p50_s"] <= metrics["model_calls/latency_p95_s"] \
        <= metrics["model_calls/latency_p99_s"]
    assert metrics["model_calls/output_tokens_per_s"] > 0
    report = sidecar(output, "_report.html").read_text()
    assert "model calls" in report and hosted_stack.stub_url in report

    progress = orjson.loads(sidecar(output, "_progress.json").read_bytes())
    assert (progress["state"], progress["done"], progress["failed"], progress["rate_limited"]) == \
        ("finished", 20, 0, 0)
    assert progress["concurrency"]["ceiling"] == 16
    assert progress["agents"][LIMITED_AGENT]["model_calls"] == 40


def test_429s_are_waited_out_and_recorded(hosted_stack: HostedStack, tmp_path: Path) -> None:
    before = hosted_stack.stats()
    # No configured limit: the first 16 rollouts ask at once, past the stub's one-second burst (11): 429s for sure.
    stdout, output = _collect(hosted_stack, AGENT, tmp_path, 40, "+num_samples_in_parallel=64")
    seen = _deltas(before, hosted_stack.stats())
    rows = read_rows(output)
    limited = sum(call["rate_limited"] for row in rows for call in row["_ng_model_calls"])
    progress = orjson.loads(sidecar(output, "_progress.json").read_bytes())
    assert len(rows) == 40 and progress["failed"] == 0
    # Every 429 of a rollout that succeeded is in its row; the model server counted those of attempts that failed too
    # (the progress file's count, read from it as they came), and the stub all of them.
    assert 5 <= limited <= progress["rate_limited"] <= seen["rate_limited"]
    assert not CUT.findall(stdout)  # waited out by the model server, which now paces the stub: no cut here
    metrics = read_metrics(sidecar(output, "_aggregate_metrics.json"))[0]["agent_metrics"]
    assert metrics["model_calls/rate_limited"] == limited and metrics["model_calls/retries"] == limited


def test_a_429_the_model_server_could_not_absorb_cuts_the_concurrency(hosted_stack: HostedStack,
                                                                      tmp_path: Path) -> None:
    """strict_model fails a call at its first 429, in front of a stub that lets 2 requests through at once and
    1 a second: 16 rollouts asking at once, some fail as rate_limited (the model server learns the rate from the first
    429 and paces the rest), which cuts the level. Each is recorded, nothing is lost. (One attempt, +max_failure_rate=1: this test is about the cut, not the retries.)"""
    stdout, output = _collect(hosted_stack, STRICT_AGENT, tmp_path, 16, "+num_samples_in_parallel=64",
                              "+max_attempts=1", "+max_failure_rate=1", exit_status=(1,))
    cuts = [(int(old), int(new)) for old, new in CUT.findall(stdout)]
    assert cuts and all(new == int(old * DECREASE) for old, new in cuts), stdout
    failed = read_rows(sidecar(output, "_failures.jsonl"))
    assert failed and {f["failure_class"] for f in failed} == {"rate_limited"}
    assert len(read_rows(output)) + len(failed) == 16
