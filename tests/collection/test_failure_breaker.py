"""A run whose every rollout fails does not loop: after 20 failed attempts in a row it pauses once, and when the
attempts begun after the pause fail as well it stops, with one error line, exit status 1, every failure recorded,
and far fewer calls to the agent than the rows' attempts would have made. The progress file says it stopped and why."""

from pathlib import Path

import orjson

from nemo_gym.rollout_collection.retry_budget import MIN_ATTEMPTS
from tests.collection.conftest import CollectionStack
from tests.collection.helper_util import stats
from tests.collection.util import read_rows, run_cli, sidecar, write_rows

ROWS, CEILING, ATTEMPTS = 60, 8, 3


def test_a_failing_run_pauses_once_then_stops(collection_stack: CollectionStack, tmp_path: Path) -> None:
    write_rows(tmp_path / "in.jsonl", ROWS)
    output = tmp_path / "r.jsonl"
    stats(collection_stack, "always_500", reset=True)
    result = run_cli("collect", collection_stack.args(
        "+agent_name=always_500", f"+input_jsonl_fpath={tmp_path}/in.jsonl", f"+output_jsonl_fpath={output}",
        f"+num_samples_in_parallel={CEILING}", f"+max_attempts={ATTEMPTS}", "+retry_backoff_s=0.01",
        "+failure_pause_s=0.5"), tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("pausing 0.5 s: ") == 1
    assert f"pausing 0.5 s: {MIN_ATTEMPTS} of the last {MIN_ATTEMPTS} rollout attempts failed (http_5xx: " \
           f"{MIN_ATTEMPTS}); last error: " in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: stopped: ") and "after a 0.5 s pause, so the run stops here" in last
    # Two windows of failures and what was in flight at each decision: nowhere near every row's attempts.
    runs = stats(collection_stack, "always_500")["runs"]
    assert runs <= 2 * (MIN_ATTEMPTS + CEILING) < ROWS * ATTEMPTS, runs
    failures = read_rows(sidecar(output, "_failures.jsonl"))
    assert failures and {f["failure_class"] for f in failures} == {"http_5xx"}
    progress = orjson.loads(sidecar(output, "_progress.json").read_bytes())
    assert progress["state"] == "stopped" and progress["message"].startswith("stopped: ")
    assert progress["failed"] == len(failures)
