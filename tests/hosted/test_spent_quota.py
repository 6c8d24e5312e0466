"""A hosted API whose quota runs out mid-run (429 insufficient_quota, retry-after 3600), through the real stack: the
model server does not wait the hour (its max_rate_limit_wait_s is 5 s here), the run stops at once with exit status
75 and one line quoting the endpoint, every finished rollout is saved once, the refused ones are recorded failures,
the progress file counts the 429s the rows never recorded, and once the quota is back a resume completes the run."""

import time
from pathlib import Path

import orjson

from benchmarks.perf.harness import write_rows
from nemo_gym.exit_status import EXIT_RETRY_LATER
from nemo_gym.rollout_collection.collect import RESUME_HINT
from nemo_gym.rollout_collection.retry_budget import REFUSALS_TO_STOP
from tests.collection.util import read_rows, run_cli, sidecar
from tests.hosted.conftest import QUOTA_AGENT, QUOTA_MAX_WAIT_S, HostedStack

ROWS, IN_FLIGHT = 16, 4
QUOTA = 12  # model calls: a weather rollout makes 2, so at most 6 rollouts finish


def _keys(path: Path) -> list[tuple[int, int]]:
    return [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in read_rows(path)]


def test_a_spent_quota_stops_the_run_quoting_the_endpoint_and_a_resume_completes_it(hosted_stack: HostedStack,
                                                                                     tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", ROWS, max_output_tokens=16)
    output = tmp_path / "out.jsonl"
    args = hosted_stack.args(QUOTA_AGENT, f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={output}",
                             f"+num_samples_in_parallel={IN_FLIGHT}")
    hosted_stack.set_quota(QUOTA)
    before = hosted_stack.stats(hosted_stack.quota_url)
    try:
        started = time.monotonic()
        stopped = run_cli("collect", args, tmp_path, timeout=120)
        elapsed = time.monotonic() - started
    finally:
        hosted_stack.set_quota(None)  # the quota resets
    refused = hosted_stack.stats(hosted_stack.quota_url)["quota_refused"] - before["quota_refused"]

    assert stopped.returncode == EXIT_RETRY_LATER, stopped.stdout + stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: stopped: model endpoint {hosted_stack.quota_url} answered 429 insufficient_quota: "
                           f"You exceeded your current quota, please check your plan and billing details; the "
                           f"endpoint asks to wait 3600 s, longer than its model server waits "
                           f"(max_rate_limit_wait_s={QUOTA_MAX_WAIT_S}), to {REFUSALS_TO_STOP} rollout attempts in "
                           f"a row"), last
    assert f"stopped: every finished rollout is saved in {output}; {RESUME_HINT} to continue once the endpoint " \
           f"serves again" in stopped.stdout
    # Neither the hour nor the cap was waited: each refused call was sent once, and the run stopped on the first few.
    assert REFUSALS_TO_STOP <= refused <= 2 * IN_FLIGHT and elapsed < 60

    done = _keys(output)
    assert 1 <= len(done) <= QUOTA // 2 and len(set(done)) == len(done)
    failures = read_rows(sidecar(output, "_failures.jsonl"))
    assert len(failures) >= REFUSALS_TO_STOP and {f["failure_class"] for f in failures} == {"rate_limited"}
    assert all("answered 429 insufficient_quota: You exceeded your current quota" in f["last_error"]
               for f in failures)
    assert not set(done) & {(f["_ng_task_index"], f["_ng_rollout_index"]) for f in failures}  # never a reward 0
    progress = orjson.loads(sidecar(output, "_progress.json").read_bytes())
    assert progress["state"] == "stopped" and progress["message"] == last.removeprefix("error: ")
    # The refusals were counted as they came, though no row recorded them (their rollouts failed).
    assert sum(call["rate_limited"] for row in read_rows(output) for call in row["_ng_model_calls"]) == 0
    assert progress["rate_limited"] >= REFUSALS_TO_STOP

    resumed = run_cli("collect", [*args, "+resume_from_cache=true"], tmp_path, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert sorted(_keys(output)) == sorted(set(_keys(output))) and len(_keys(output)) == ROWS
    assert not sidecar(output, "_failures.jsonl").exists()
