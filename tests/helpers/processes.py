"""Stopping what a test started: a child that leads its own session, and everything it spawned."""

import os
import signal
import subprocess
import threading


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


class OutputReader:
    """A child's stdout read as it comes (in a thread), so a test can wait until a piece of it appears: it waits on
    the output, and the deadline only bounds a failure."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.data = b""
        self.closed = False  # the child closed its stdout (it exited): nothing more will come
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(popen.stdout,), daemon=True).start()

    def _read(self, stream) -> None:
        while chunk := stream.read1(4096):
            with self._changed:
                self.data += chunk
                self._changed.notify_all()
        with self._changed:
            self.closed = True
            self._changed.notify_all()

    @property
    def text(self) -> str:
        return self.data.decode(errors="replace")

    def wait_for(self, piece: bytes, timeout_s: float = 120) -> bool:
        """Whether `piece` appeared within `timeout_s` (False at once when the output ended without it)."""
        with self._changed:
            self._changed.wait_for(lambda: piece in self.data or self.closed, timeout=timeout_s)
            return piece in self.data
