"""Run `ng_run` as a child process: started, awaited until the head server says every server is healthy, and
always stopped.

Tests, benchmarks and programs that own a whole stack (a trainer driving collection) need the real `ng_run`, with
its own process tree and signal handling, not an in-process Supervisor.
"""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from nemo_gym.config import load_global_config
from nemo_gym.config.global_settings import head_server
from nemo_gym.config.timeouts import NG_RUN_STOP_GRACE_S
from nemo_gym.errors import DownstreamError
from nemo_gym.server.client import fetch_status

_POLL_S = 0.2


def _all_healthy(head_url: str) -> bool:
    try:
        return bool(fetch_status(head_url, timeout_s=5.0)["all_healthy"])
    except DownstreamError:
        return False  # the head server is not up yet


@contextmanager
def ng_run_process(args: Sequence[str], cwd: Path, log_path: Path, *, env: Mapping[str, str] | None = None,
                   timeout_s: float = 120.0) -> Iterator[subprocess.Popen]:
    """Start `ng_run ARGS` in `cwd` with its output in `log_path`; yield it once its head server (found from ARGS
    as ng_run finds it) says every server is healthy; SIGTERM it afterwards (SIGKILL after NG_RUN_STOP_GRACE_S).
    Raises RuntimeError with the log's tail when it exits or times out first."""
    head_url = head_server(load_global_config(list(args), cwd=cwd, require_complete=False).values).url
    child_env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        popen = subprocess.Popen([sys.executable, "-c", "from nemo_gym.cli.run import main; main()", *args],
                                 cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=child_env)
    try:
        deadline = time.monotonic() + timeout_s
        while not _all_healthy(head_url):
            if popen.poll() is not None:
                raise RuntimeError(f"ng_run exited with {popen.returncode}:\n{log_path.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ng_run not healthy after {timeout_s}s:\n{log_path.read_text()[-4000:]}")
            time.sleep(_POLL_S)
        yield popen
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=NG_RUN_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
