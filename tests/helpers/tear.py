"""SIGKILL a writer while a line it is appending is only partly on disk, by construction rather than by luck.

The writer is pinned to one CPU; this watcher runs on that same CPU under SCHED_FIFO. Whenever the watcher is
awake, the writer (an ordinary task on that CPU) is not running, so a partial last line seen by the watcher is still
partial when the SIGKILL is sent, and the kernel stops the write there. A write longer than the watcher's poll
period (a line of a few MiB takes milliseconds to copy, the period is 100 µs) is therefore always caught.

Run as `python -m tests.helpers.tear PID PATH TIMEOUT_S`, pinned with `pin_to_tear_cpu`; exit 0 after a kill that
tore the file, 3 when no write was seen in progress before the timeout or the writer exited first.
"""

import os
import signal
import sys
import time
from typing import Callable

TORN, NOTHING_TO_TEAR = 0, 3
POLL_S = 100e-6


def tear_cpu() -> int:
    """The CPU the writer and the watcher share."""
    return min(os.sched_getaffinity(0))


def pin_to_tear_cpu() -> Callable[[], None]:
    """A `preexec_fn` that pins the writer to the watcher's CPU."""
    cpu = tear_cpu()
    return lambda: os.sched_setaffinity(0, {cpu})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_mid_line(pid: int, path: str, timeout_s: float) -> int:
    os.sched_setaffinity(0, {tear_cpu()})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    deadline = time.monotonic() + timeout_s
    fd = -1
    try:
        while time.monotonic() < deadline and _alive(pid):
            if fd < 0:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    time.sleep(POLL_S)
                    continue
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                os.kill(pid, signal.SIGKILL)
                return TORN
            time.sleep(POLL_S)
        return NOTHING_TO_TEAR
    finally:
        if fd >= 0:
            os.close(fd)


if __name__ == "__main__":
    sys.exit(kill_mid_line(int(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
