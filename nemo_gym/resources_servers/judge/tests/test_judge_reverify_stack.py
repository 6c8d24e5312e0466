"""The judge environment through the whole stack (ng_run, ng_collect_rollouts, ng_reverify_rollouts) with the
scripted policy and the scripted judge: a judge that is down or answers garbage gives recorded failures and no
reward; re-verifying only those once the judge is back gives the metrics of a run in which it never failed; an
interrupted re-verification resumes with every rollout exactly once."""

import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import orjson
import pytest

from nemo_gym.failures import FailureClass
from nemo_gym.resources_servers.judge.tests.judge_stack import (
    AGENT, FAULTY, REPEATS, ROWS, Verdicts, expected_rewards, judge_stack, policy_calls, verdicts, write_rows,
)
from tests.collection.util import cli, head_args, read_rows, run_cli, sidecar
from tests.helpers.stack import REPO_ROOT, Stack

WAIT_S = 60.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path, Path]]:
    workdir = tmp_path_factory.mktemp("judge_stack")
    state = workdir / "judge_state"
    state.write_text("ok")
    with judge_stack(workdir, state) as running:
        yield running, state, workdir


def _collect(stack: Stack, workdir: Path, rows: Path, output: Path) -> subprocess.CompletedProcess:
    return run_cli("collect", [*head_args(stack.head_url), f"+agent_name={AGENT}", f"+input_jsonl_fpath={rows}",
                               f"+output_jsonl_fpath={output}", f"+num_repeats={REPEATS}"], workdir)


def _reverify_args(stack: Stack, source: Path, output: Path, *extra: str) -> list[str]:
    return [*head_args(stack.head_url), f"+input_jsonl_fpath={source}", f"+output_jsonl_fpath={output}", *extra]


def _rewards(output: Path) -> dict[tuple[int, int], float]:
    rows = read_rows(output)
    keys = [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in rows]
    assert len(keys) == len(set(keys)), f"a rollout written twice in {output}"
    return {key: row["reward"] for key, row in zip(keys, rows)}


def _metrics(output: Path) -> list[dict]:
    """The aggregate metrics but the timings of the model calls (`..._s`), which no two runs share."""
    entries = orjson.loads(sidecar(output, "_aggregate_metrics.json").read_bytes())
    for entry in entries:
        for part in ("agent_metrics", "key_metrics"):
            entry[part] = {key: value for key, value in entry[part].items() if not key.endswith("_s")}
    return entries


def test_judge_failures_are_recorded_and_reverifying_them_gives_the_run_that_never_failed(
        stack: tuple[Stack, Path, Path]) -> None:
    running, state, workdir = stack
    rows = write_rows(workdir / "rows.jsonl")
    faulty_run, reverified, clean_run = (workdir / name / "rollouts.jsonl" for name in ("faulty", "reverified", "clean"))

    state.write_text("faulty")
    failed = _collect(running, workdir, rows, faulty_run)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    records = read_rows(sidecar(faulty_run, "_failures.jsonl"))
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in records) == sorted(
        (task, rollout) for task in FAULTY for rollout in range(REPEATS))
    for record in records:  # a recorded failure, never a reward; the rollout kept for re-verification
        assert record["failure_class"] == FailureClass.JUDGE_ERROR and "reward" not in record
        assert "reward" not in record["rollout"] and record["rollout"]["response"]["output"]
        assert ("503" in record["last_error"] or "no verdict" in record["last_error"])
    scored = _rewards(faulty_run)
    assert set(scored) == set(expected_rewards()) - {(t, r) for t in FAULTY for r in range(REPEATS)}
    [entry] = _metrics(faulty_run)
    assert entry["agent_metrics"]["num_failed/judge_error"] == len(records)
    assert entry["agent_metrics"]["mean/reward"] == sum(scored.values()) / len(scored)  # failures left out
    # How the verdicts read, against what the scripted judge was told to do with each row.
    skipped = {i for i, (say, _, _, _) in enumerate(ROWS) if not say or "[[" in say}
    garbage, down = ({i for i, (_, _, markers, _) in enumerate(ROWS) if word in markers}
                     for word in ("garbage", "down"))
    faulty_verdicts = verdicts(read_rows(faulty_run), records)
    assert faulty_verdicts == Verdicts(parsed=REPEATS * (len(ROWS) - len(skipped | FAULTY)),
                                       no_verdict=REPEATS * len(garbage), call_failed=REPEATS * len(down))
    assert faulty_verdicts.parsed_share == (len(ROWS) - len(skipped | FAULTY)) / (len(ROWS) - len(skipped | down))

    state.write_text("ok")
    calls = policy_calls(running)
    again = run_cli("reverify", _reverify_args(running, faulty_run, reverified, "+failed_only=true"), workdir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert policy_calls(running) == calls  # verified again without the model
    assert not sidecar(reverified, "_failures.jsonl").exists()
    model_calls = {(r["_ng_task_index"], r["_ng_rollout_index"]): r["rollout"]["_ng_model_calls"] for r in records}
    assert all(row["_ng_model_calls"] == model_calls[row["_ng_task_index"], row["_ng_rollout_index"]]  # its own
               for row in read_rows(reverified) if (row["_ng_task_index"], row["_ng_rollout_index"]) in model_calls)
    copied = {line for line in reverified.read_bytes().splitlines()} & set(faulty_run.read_bytes().splitlines())
    assert len(copied) == len(scored)  # the rollouts verified the first time are copied as they were

    clean = _collect(running, workdir, rows, clean_run)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert _rewards(reverified) == _rewards(clean_run) == expected_rewards()
    assert verdicts(read_rows(clean_run), []) == Verdicts(REPEATS * (len(ROWS) - len(skipped)), 0, 0)
    assert _metrics(reverified) == _metrics(clean_run)


def test_an_interrupted_reverification_resumes_with_every_rollout_exactly_once(
        stack: tuple[Stack, Path, Path]) -> None:
    running, state, workdir = stack
    held = 2
    rows = write_rows(workdir / "rows_hold.jsonl", hold=held)
    source, output = workdir / "source" / "rollouts.jsonl", workdir / "again" / "rollouts.jsonl"
    state.write_text("ok")
    assert _collect(running, workdir, rows, source).returncode == 0

    # One verification at a time, in key order: the judge holds the first rollout of task 2, so the rollouts of
    # tasks 0 and 1 are written and nothing after them, when the command is killed.
    state.write_text("hold")
    args = _reverify_args(running, source, output, "+num_samples_in_parallel=1")
    popen = subprocess.Popen(cli("reverify", args), cwd=workdir, env={"PYTHONPATH": str(REPO_ROOT)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT_S
        while not output.is_file() or len(output.read_bytes().splitlines()) < held * REPEATS:
            assert popen.poll() is None and time.monotonic() < deadline, "the re-verification never reached the hold"
            time.sleep(0.05)
    finally:
        popen.send_signal(signal.SIGKILL)
        popen.wait()
    before = output.read_bytes()
    assert len(before.splitlines()) == held * REPEATS
    with open(output, "ab") as file:  # and a line torn by the kill
        file.write(b'{"_ng_task_index":2,"_ng_rollout_ind')

    state.write_text("ok")
    fresh = run_cli("reverify", args, workdir)
    assert fresh.returncode == 2 and "+resume_from_cache=true" in fresh.stderr
    changed = run_cli("reverify", [*args, "+resume_from_cache=true", "+failed_only=true"], workdir)
    assert changed.returncode == 2 and "refusing to resume" in changed.stderr
    resumed = run_cli("reverify", [*args, "+resume_from_cache=true"], workdir)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "dropped a torn last line" in resumed.stdout
    assert output.read_bytes().startswith(before)
    assert _rewards(output) == _rewards(source) == expected_rewards()
    assert len(read_rows(output)) == len(ROWS) * REPEATS
