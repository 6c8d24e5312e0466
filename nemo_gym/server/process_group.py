"""Child processes that lead a process group of their own (a server and its workers, a vLLM and its engine): each
dies with its parent, is signalled as a group, and is stopped with a grace period, then killed."""

import ctypes
import os
import signal
import subprocess
import time

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel SIGTERM this process when its parent dies, even by SIGKILL (a `preexec_fn`, or the first
    call of a forked child): a group of its own is out of reach of its parent's group kill."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group `pid` leads; a group that is gone already is no error."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_process_groups(popens: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM the process group each of `popens` leads, give them `grace_s` seconds in all, then SIGKILL what is
    left of each group (grandchildren too, even after the child itself exited)."""
    for popen in popens:
        signal_group(popen.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for popen in popens:
        try:
            popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for popen in popens:
        signal_group(popen.pid, signal.SIGKILL)
        try:
            popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
