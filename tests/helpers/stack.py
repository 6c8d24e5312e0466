"""Run real `ng_run` subprocesses in tests and stop them cleanly."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    from nemo_gym.server.supervisor import free_port as _free_port

    return _free_port()


class Stack:
    def __init__(self, popen: subprocess.Popen, head_url: str, log_path: Path) -> None:
        self.popen = popen
        self.head_url = head_url
        self.log_path = log_path

    def servers(self) -> dict[str, str]:
        listing = httpx.get(f"{self.head_url}/servers", trust_env=False).json()["servers"]
        return {s["name"]: s["url"] for s in listing}

    def url(self, name: str) -> str:
        return self.servers()[name]


@contextmanager
def running_stack(args: list[str], cwd: Path, timeout_s: float = 120.0) -> Iterator[Stack]:
    """Start `ng_run ARGS` in `cwd` on a free head port; yield once every server is healthy; stop it afterwards."""
    head_port = free_port()
    log_path = cwd / f"ng_run-{head_port}.log"
    log = open(log_path, "wb")
    popen = subprocess.Popen(
        [sys.executable, "-c", "from nemo_gym.cli.run import main; main()", *args, f"+head_server.port={head_port}"],
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    head_url = f"http://127.0.0.1:{head_port}"
    try:
        deadline = time.monotonic() + timeout_s
        while b"all servers healthy" not in log_path.read_bytes():
            if popen.poll() is not None:
                raise RuntimeError(f"ng_run exited with {popen.returncode}:\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ng_run not healthy after {timeout_s}s:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield Stack(popen, head_url, log_path)
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                popen.kill()
        log.close()
