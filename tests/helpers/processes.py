"""Stopping what a test started: a child that leads its own session, and everything it spawned."""

import os
import signal
import subprocess


def stop_process_group(popen: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the child's process group; SIGKILL it if the child has not exited within `grace_s`."""
    try:
        os.killpg(popen.pid, signal.SIGTERM)
        popen.wait(timeout=grace_s)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(timeout=30)
