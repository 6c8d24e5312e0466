"""A performance benchmark stops every process it started, however it ends: SIGTERM or SIGINT to the benchmark, to
the `python -m benchmarks.perf` runner, or an exception. vLLM is started by `benchmarks.perf.lifecycle.child_process`
inside `recording`; the tests use the same two with cheap children: Python's http.server (which, like vLLM, outlives
a parent that is killed) in a benchmark-shaped app, and the aggregation benchmark's resources server."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.perf.lifecycle import child_process
from tests.helpers.stack import REPO_ROOT


def _listening(proc: psutil.Process) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN for c in proc.net_connections(kind="inet"))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _start(command: list[str], results_dir: Path, servers: int, timeout_s: float = 180) -> tuple[subprocess.Popen,
                                                                                                  set[int]]:
    """Start `command` and wait until `servers` of its descendants listen; return it and every descendant pid."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "NEMO_GYM_BENCH_RESULTS_DIR": str(results_dir),
           "NEMO_GYM_BENCH_IDLE_WAIT_S": "0"}
    popen = subprocess.Popen([sys.executable, "-m", *command], cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    while True:
        assert popen.poll() is None, f"{command} exited early: {popen.stderr.read().decode()[-2000:]}"
        descendants = psutil.Process(popen.pid).children(recursive=True)
        if sum(_listening(p) for p in descendants) >= servers:
            return popen, {p.pid for p in descendants}
        if time.monotonic() > deadline:
            popen.kill()
            raise AssertionError(f"{command}: {servers} servers not listening after {timeout_s} s")
        time.sleep(0.3)


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _assert_all_stopped(popen: subprocess.Popen, pids: set[int], expected_code: int) -> None:
    try:
        code = popen.wait(timeout=150)
    finally:
        left = _alive(pids | {popen.pid})
        for pid in left:  # never leave them behind, even when the assertion below fails
            os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after the benchmark ended: {left}"
    assert code == expected_code, popen.stderr.read().decode()[-2000:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_a_benchmark_stops_the_server_it_started(sig: signal.Signals, tmp_path: Path) -> None:
    popen, pids = _start(["tests.benchmarks.apps.child_server_benchmark"], tmp_path, servers=1)
    popen.send_signal(sig)
    _assert_all_stopped(popen, pids, 128 + sig)
    assert not list(tmp_path.iterdir()), "an interrupted benchmark writes no results file"


def test_sigterm_to_the_aggregation_benchmark_stops_its_resources_server(tmp_path: Path) -> None:
    popen, pids = _start(["benchmarks.perf.aggregate", "--sizes", "3000000"], tmp_path, servers=1)
    popen.send_signal(signal.SIGTERM)
    _assert_all_stopped(popen, pids, 128 + signal.SIGTERM)


def test_sigterm_to_the_runner_stops_the_benchmark_it_runs(tmp_path: Path) -> None:
    """The benchmark runs in a session of its own: only the runner can pass the signal on."""
    popen, pids = _start(["benchmarks.perf", "aggregate"], tmp_path, servers=1)
    popen.send_signal(signal.SIGTERM)
    _assert_all_stopped(popen, pids, 128 + signal.SIGTERM)


# The child starts a grandchild in a session of its own (as Ray does) and prints its pid only once it has moved:
# Popen returns after the exec, and start_new_session makes the grandchild call setsid() before it.
MOVER = ("import subprocess, sys, time\n"
         "moved = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
         "print(moved.pid, flush=True)\n"
         "time.sleep(600)\n")


def test_an_exception_stops_the_child_and_what_it_moved_to_another_session() -> None:
    """Processes that left the child's session (as Ray's do) are found by the token in their environment."""
    with pytest.raises(RuntimeError, match="benchmark body failed"):
        with child_process([sys.executable, "-c", MOVER], grace_s=10, stdout=subprocess.PIPE, text=True) as popen:
            moved = int(popen.stdout.readline())
            # Out of reach of the signal to the child's session: only the token sweep can stop it.
            assert os.getsid(moved) == moved != os.getsid(popen.pid) == popen.pid
            assert psutil.Process(moved).ppid() == popen.pid and psutil.Process(moved).name() == "sleep"
            raise RuntimeError("benchmark body failed")
    # Signalled by the sweep, it may still be on its way out on a loaded machine (its environment gone, not yet a
    # zombie); unsignalled, it would sleep for 600 s.
    given_up_at = time.monotonic() + 30
    while _alive({moved}) and time.monotonic() < given_up_at:
        time.sleep(0.05)
    left = _alive({moved})
    for pid in left:  # never leave it behind, even when the assertion below fails
        os.kill(pid, signal.SIGKILL)
    assert popen.poll() is not None
    assert not left, f"the process moved to another session is still running: {moved}"
