"""ng_run as a user runs it: a real subprocess, real child servers over loopback."""

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.helpers.stack import REPO_ROOT, free_port, running_stack

ECHO_APP = REPO_ROOT / "tests" / "helpers" / "echo_app.py"

TWO_SERVERS = f"""\
echo_a:
  resources_servers:
    echo:
      entrypoint: {ECHO_APP}
      api_key: ${{policy_api_key}}
echo_b:
  resources_servers:
    echo:
      entrypoint: {ECHO_APP}
      peer: {{type: resources_servers, name: echo_a}}
"""


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _wait_gone(pids: list[int], timeout_s: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


def _ng_run(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from nemo_gym.cli.run import main; main()", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )


def test_servers_answer_and_head_redacts_secrets(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(TWO_SERVERS)
    with running_stack(["+config_paths=[c.yaml]", "+policy_api_key=sk-do-not-leak-42"], tmp_path) as stack:
        urls = stack.servers()
        assert set(urls) == {"echo_a", "echo_b"}
        assert all(u.startswith("http://127.0.0.1:") for u in urls.values())
        reply = httpx.post(f"{urls['echo_a']}/echo", json={"x": 1}, trust_env=False).json()
        assert reply["echo"] == {"x": 1} and reply["name"] == "echo_a"
        config_text = httpx.get(f"{stack.head_url}/global_config", trust_env=False).text
        assert "sk-do-not-leak-42" not in config_text and "REDACTED" in config_text
        status = subprocess.run(
            [sys.executable, "-c", "from nemo_gym.cli.status import main; main()",
             f"+head_server.port={stack.head_url.rsplit(':', 1)[1]}"],
            capture_output=True, text=True, timeout=30,
        )
        assert status.returncode == 0, status.stderr
        assert "echo_a" in status.stdout and "ok" in status.stdout
    logs = "".join(p.read_text() for p in tmp_path.rglob("*.log"))
    assert "sk-do-not-leak-42" not in logs


def _ng_status(head_url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from nemo_gym.cli.status import main; main()",
                           f"+head_server.port={head_url.rsplit(':', 1)[1]}"], capture_output=True, text=True, timeout=60)


def test_status_says_healthy_only_once_every_server_is(tmp_path: Path) -> None:
    # The head server's /status (and ng_status) is how scripts wait for a stack: never a line of ng_run's output.
    (tmp_path / "c.yaml").write_text(TWO_SERVERS + "      ready_after_s: 20\n")
    head_url = f"http://127.0.0.1:{free_port()}"
    popen = subprocess.Popen([sys.executable, "-c", "from nemo_gym.cli.run import main; main()", "+config_paths=[c.yaml]",
                              "+policy_api_key=k", f"+head_server.port={head_url.rsplit(':', 1)[1]}"],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        seen, checked_unhealthy, deadline = [], False, time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"{head_url}/status", trust_env=False, timeout=10).json()
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            health = {s["name"]: s["health"] for s in status["servers"]}
            seen.append((status["all_healthy"], health["echo_b"]))
            if status["all_healthy"]:
                break
            if not checked_unhealthy:
                assert _ng_status(head_url).returncode == 1  # not healthy yet: exit 1
                checked_unhealthy = True
            time.sleep(0.5)
        assert seen[-1] == (True, "ok") and all(not ok for ok, _ in seen[:-1]), seen
        assert any(b == "starting" for _, b in seen), seen  # echo_b answered 503 before it was ready
        done = _ng_status(head_url)
        assert done.returncode == 0 and "echo_b" in done.stdout, done.stdout + done.stderr
    finally:
        popen.terminate()
        popen.wait(timeout=60)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_leaves_no_child_process(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "c.yaml").write_text(TWO_SERVERS)
    with running_stack(["+config_paths=[c.yaml]", "+policy_api_key=k"], tmp_path) as stack:
        children = [p.pid for p in _descendants(stack.popen.pid)]
        assert len(children) >= 2
        stack.popen.send_signal(sig)
        assert stack.popen.wait(timeout=30) == 0
        assert _wait_gone(children) == []


def test_sigkill_of_ng_run_still_stops_children(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(TWO_SERVERS)
    with running_stack(["+config_paths=[c.yaml]", "+policy_api_key=k"], tmp_path) as stack:
        children = [p.pid for p in _descendants(stack.popen.pid)]
        stack.popen.kill()
        stack.popen.wait(timeout=10)
        assert _wait_gone(children) == []


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_unknown_server_reference_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(TWO_SERVERS.replace("name: echo_a}", "name: echo_zzz}"))
    line = _one_line_error(_ng_run(["+config_paths=[c.yaml]", "+policy_api_key=k"], tmp_path))
    assert "echo_zzz" in line and "c.yaml:" in line


def test_missing_policy_base_url_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text((REPO_ROOT / "configs" / "vllm_model.yaml").read_text())
    line = _one_line_error(_ng_run(["+config_paths=[c.yaml]", "+policy_api_key=k", "+policy_model_name=m"], tmp_path))
    assert "policy_base_url" in line and "c.yaml:" in line


def test_port_already_taken_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        (tmp_path / "c.yaml").write_text(TWO_SERVERS + f"      port: {port}\n")
        line = _one_line_error(_ng_run(["+config_paths=[c.yaml]", "+policy_api_key=k",
                                        f"+head_server.port={free_port()}"], tmp_path))
    assert f"port {port}" in line and "echo_b" in line and "already in use" in line


def test_server_that_fails_to_start_is_named_with_its_log(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(TWO_SERVERS + "      crash_on_start: true\n")
    result = _ng_run(["+config_paths=[c.yaml]", "+policy_api_key=k", f"+head_server.port={free_port()}"], tmp_path)
    assert result.returncode == 1  # a server failed, not the command line
    first = result.stderr.splitlines()[0]
    assert "server 'echo_b' exited" in first and "echo_b.log" in first
    assert "crash_on_start is set" in result.stderr
    assert [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])] == []
