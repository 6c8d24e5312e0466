"""While a server starts (a vLLM cold start takes minutes), ng_run says every few seconds which servers are still
starting, for how long and what each logged last; ng_status says the same; the line that says all is healthy is a
whole line (newline included) while ng_run keeps running."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_gym.server.startup_progress import Starting, last_log_line, waiting_line
from tests.helpers.processes import OutputReader
from tests.helpers.stack import REPO_ROOT, free_port

ECHO_APP = REPO_ROOT / "tests" / "helpers" / "echo_app.py"
HEALTHY_LINE = b"all servers healthy; Ctrl-C to stop\n"


def _wait_for(output: OutputReader, piece: bytes) -> None:
    if not output.wait_for(piece):
        pytest.fail(f"{piece!r} not seen in ng_run's output:\n{output.text}")


def test_ng_run_and_ng_status_say_what_is_still_starting(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    (tmp_path / "servers.yaml").write_text(
        f"slow:\n  resources_servers:\n    echo:\n      entrypoint: {ECHO_APP}\n      ready_file: {ready}\n"
        f"quick:\n  resources_servers:\n    echo:\n      entrypoint: {ECHO_APP}\n")
    port = free_port()
    head = f"+head_server.port={port}"
    popen = subprocess.Popen(
        [sys.executable, "-c", "from nemo_gym.cli.run import main; main()", f"+config_paths=[{tmp_path}/servers.yaml]",
         head, f"+log_dir={tmp_path}/logs"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = OutputReader(popen)
    try:
        _wait_for(output, b"still starting 1 of 2 servers: slow (")
        progress = next(line for line in output.data.decode().splitlines() if line.startswith("still starting"))
        assert progress.endswith(f'; last log line: "loading: waiting for {ready}")'), progress

        status = subprocess.run([sys.executable, "-c", "from nemo_gym.cli.status import main; main()", head],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 1, status.stdout + status.stderr
        (slow_row,) = [line for line in status.stdout.splitlines() if line.startswith("slow  ")]
        assert " starting for " in slow_row and slow_row.endswith(" s")
        assert f"slow last logged: loading: waiting for {ready}" in status.stdout
        assert all(line == line.rstrip() for line in status.stdout.splitlines())  # no padding after the last column

        ready.touch()
        _wait_for(output, HEALTHY_LINE)  # the whole line, newline included, while ng_run keeps running
        assert popen.poll() is None
    finally:
        popen.send_signal(signal.SIGINT)
        popen.wait(timeout=60)
    assert popen.returncode == 0


@pytest.mark.parametrize("log, shown", [
    (b'{"ts": 1, "level": "info", "msg": "vLLM ready after 21 s"}\n', "vLLM ready after 21 s"),
    (b"INFO Loading weights\n\x1b[32mLoading safetensors:  50%\rLoading safetensors: 100%\x1b[0m\n\n",
     "Loading safetensors: 100%"),
    (b"x" * 300 + b"\n", "x" * 157 + "..."),
    (b"", None),
])
def test_last_log_line_is_what_a_terminal_would_show_last(tmp_path: Path, log: bytes, shown: str | None) -> None:
    (tmp_path / "server.log").write_bytes(log)
    assert last_log_line(tmp_path / "server.log") == shown
    assert last_log_line(tmp_path / "missing.log") is None


def test_a_progress_line_names_each_server_still_starting() -> None:
    line = waiting_line([Starting("policy_model", 12.4, "Loading weights"), Starting("env", 3.0, None)], 3)
    assert line == ('still starting 2 of 3 servers: policy_model (12 s; last log line: "Loading weights"); '
                    "env (3 s; nothing logged yet)")
