"""`ng_view` as a real subprocess (`python -m nemo_gym.cli.view`, so no reinstall is needed), stopped however the
test ends."""

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from tests.helpers.processes import stop_process_group
from tests.helpers.stack import REPO_ROOT, free_port


def view_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "nemo_gym.cli.view", *args]


def run_view(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(view_command(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


@contextmanager
def running_viewer(args: list[str], cwd: Path, timeout_s: float = 120) -> Iterator[str]:
    """Start ng_view with `args` on a free port; yield its base URL once it answers; stop it afterwards."""
    port = free_port()
    log_path = cwd / f"ng_view-{port}.log"
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(view_command(*args, f"+port={port}"), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                assert popen.poll() is None, f"ng_view exited with {popen.returncode}: {log_path.read_text()}"
                try:
                    if httpx.get(f"{url}/health", trust_env=False, timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"ng_view not up after {timeout_s} s: {log_path.read_text()}"
                time.sleep(0.1)
            # The overview's metrics come from a background phase: /api/overview answers once they are in, so the
            # tests see every page complete.
            assert httpx.get(f"{url}/api/overview", trust_env=False, timeout=timeout_s).status_code == 200
            yield url
        finally:
            stop_process_group(popen, grace_s=15)
