"""kill -9 of the environment (resources) server mid-run: its rollouts fail cleanly, the run pauses once and then
stops (every attempt fails: the run-wide retry budget), and everything succeeds on resume once the stack is back.
This test owns its stack (ng_run stops every server when one dies) and restarts it."""

import os
import signal
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.collection.util import cli, keys, read_rows, run_cli, sidecar
from tests.helpers.stack import Stack, free_port, running_stack
from tests.reliability.conftest import AGENT, stack_args, wait_for_lines, write_weather_rows

ROWS = 1000
ENV_SERVER = "example_single_tool_call"


def _server_pid(stack: Stack, name: str) -> int:
    """The pid of the ng_run child serving `name` (its spec travels in the child's environment)."""
    children = Path(f"/proc/{stack.popen.pid}/task/{stack.popen.pid}/children").read_text().split()
    for pid in map(int, children):
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if entry.startswith(b"NEMO_GYM_SERVER_SPEC=") and orjson.loads(entry.split(b"=", 1)[1])["name"] == name:
                return pid
    raise LookupError(f"no server process named {name}")


def _stack_argv(workdir: Path) -> list[str]:
    # A fresh stub port per start: ng_run refuses a fixed port that the stopped stack left in TIME_WAIT.
    chat_port = free_port()
    return stack_args(workdir, chat_port, f"http://127.0.0.1:{chat_port}/v1")


@pytest.mark.timeout(150)
def test_env_server_killed_mid_run_fails_cleanly_then_resume_completes(tmp_path: Path) -> None:
    write_weather_rows(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "r.jsonl"
    failures_path = sidecar(out, "_failures.jsonl")

    def args(stack: Stack, *extra: str) -> list[str]:
        return [f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}", f"+agent_name={AGENT}",
                f"+input_jsonl_fpath={tmp_path / 'in.jsonl'}", f"+output_jsonl_fpath={out}",
                "+max_attempts=2", "+retry_backoff_s=0.05", "+failure_pause_s=1", *extra]

    with running_stack(_stack_argv(tmp_path), cwd=tmp_path) as stack:
        proc = subprocess.Popen(cli("collect", args(stack, "+num_samples_in_parallel=4")), cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for_lines(out, 100, proc)
        os.kill(_server_pid(stack, ENV_SERVER), signal.SIGKILL)
        output, _ = proc.communicate(timeout=90)
        stack.popen.wait(timeout=30)  # ng_run sees the dead server and stops the rest
    assert proc.returncode == 1 and "Traceback" not in output, output
    assert stack.popen.returncode == 1

    succeeded = keys(out)
    failures = read_rows(failures_path)
    failed = [(f["_ng_task_index"], f["_ng_rollout_index"]) for f in failures]
    print(f"env server killed after {len(succeeded)} rollouts; {len(failed)} failed: "
          f"{sorted({f['failure_class'] for f in failures})}")
    assert failed and {f["failure_class"] for f in failures} <= {"connect", "http_5xx"}
    assert all(f["last_error"] and "reward" not in f for f in failures)
    assert len(set(succeeded)) == len(succeeded) and set(succeeded).isdisjoint(failed)
    assert set(succeeded) | set(failed) < {(t, 0) for t in range(ROWS)}  # the rest were never started
    assert all(row["reward"] == 1.0 for row in read_rows(out))
    assert output.count("pausing 1 s: ") == 1 and "error: stopped: " in output

    with running_stack(_stack_argv(tmp_path), cwd=tmp_path) as stack:
        resumed = run_cli("collect", args(stack, "+num_samples_in_parallel=32", "+resume_from_cache=true"),
                          tmp_path, timeout=90)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{len(failed)} failed ones will be retried" in resumed.stdout
    assert sorted(keys(out)) == [(t, 0) for t in range(ROWS)]
    assert all(row["reward"] == 1.0 for row in read_rows(out)) and not failures_path.exists()
