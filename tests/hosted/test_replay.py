"""Replay of finished model calls after a crash, through the real stack (collector -> simple_agent -> vllm_model with
two worker processes -> a hosted stub that counts what it bills): the collector is killed with SIGKILL while every
rollout in flight has made its first model call and waits on its second (the stub holds second turns, so the kill
lands between two turns by construction). The resumed run answers every call those rollouts had finished from the
journal: the stub bills exactly what an uninterrupted run costs, each rollout is in the output once, the replayed
calls carry the recorded replies and tokens, and the journal is gone once every rollout is in the output."""

import os
import signal
import subprocess
import time
from pathlib import Path

import orjson

from benchmarks.perf.harness import write_rows
from nemo_gym.model_call_replay import TAG_FIELD, journal_path, read_journal
from tests.collection.util import cli, read_rows
from tests.helpers.stack import REPO_ROOT
from tests.hosted.conftest import REPLAY_AGENT, HostedStack

ROWS, IN_FLIGHT, CALLS_PER_ROLLOUT = 12, 4, 2  # the weather task: a tool call, then the answer


def _wait(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_killed_run_resumes_without_billing_a_finished_call_again(hosted_stack: HostedStack,
                                                                     tmp_path: Path) -> None:
    inputs = write_rows(tmp_path / "in.jsonl", ROWS, max_output_tokens=16)
    output = tmp_path / "out.jsonl"
    journal = journal_path(output)
    args = hosted_stack.args(REPLAY_AGENT, f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={output}",
                             f"+num_samples_in_parallel={IN_FLIGHT}", "+adaptive_concurrency=false")
    billed = lambda: hosted_stack.stats(hosted_stack.replay_url)["completed"]  # noqa: E731
    before = billed()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    hosted_stack.control(hosted_stack.replay_url, hold_tool_results=True)
    try:
        collector = subprocess.Popen(cli("collect", args), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        try:
            _wait(lambda: hosted_stack.stats(hosted_stack.replay_url)["held"] == IN_FLIGHT,
                  "every rollout in flight to wait on its second turn")
        finally:
            collector.send_signal(signal.SIGKILL)
            collector.wait(timeout=30)
        assert not output.exists() or not output.read_bytes()  # no rollout had finished
        assert billed() - before == IN_FLIGHT  # each first turn, once
    finally:
        hosted_stack.control(hosted_stack.replay_url, hold_tool_results=False)
    # The orphaned rollouts go on in the agent without their collector: their second turns are billed and recorded.
    _wait(lambda: sum(1 for _ in read_journal(journal)) == IN_FLIGHT * CALLS_PER_ROLLOUT,
          "the orphaned rollouts' second turns in the journal")
    recorded = {(r.key, i): r.reply for i, r in enumerate(read_journal(journal))}

    resumed = subprocess.run(cli("collect", [*args, "+resume_from_cache=true"]), cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    replayed = IN_FLIGHT * CALLS_PER_ROLLOUT
    assert f"replay: {replayed} model calls were answered as an earlier run had recorded them" in resumed.stdout
    # Billed: exactly an uninterrupted run's calls (the bound is the calls in flight at the kill; here all finished).
    assert billed() - before == ROWS * CALLS_PER_ROLLOUT

    rows = read_rows(output)
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows]
    assert len(keys) == len(set(keys)) == ROWS
    interrupted = {key for key, _ in recorded}
    assert len(interrupted) == IN_FLIGHT
    for row in rows:
        key = (row["_ng_task_index"], row["_ng_rollout_index"])
        calls = row["_ng_model_calls"]
        assert [call["replayed"] for call in calls] == [key in interrupted] * CALLS_PER_ROLLOUT
        assert TAG_FIELD not in orjson.dumps(row).decode()  # the tag never reaches the output
        if key in interrupted:
            replies = [reply for (k, _), reply in sorted(recorded.items(), key=lambda item: item[0][1]) if k == key]
            # The recorded replies, tokens and all: each call's record, and the final answer the row holds.
            assert [(c["started_at"], c["input_tokens"], c["output_tokens"]) for c in calls] == \
                [(r["_ng_model_call"]["started_at"], r["_ng_model_call"]["input_tokens"],
                  r["_ng_model_call"]["output_tokens"]) for r in replies]
            items = row["response"]["output"]  # the tool call, its result, the answer: the replies' own ids
            assert (items[0], items[-1]) == (replies[0]["output"][0], replies[-1]["output"][-1])
    assert not journal.exists()  # every rollout is in the output: nothing left to replay
