"""Checkpoint writers for the SIGKILL test: `python -m tests.experience.checkpoint_writer STATE FOLDER=POINT...`.

Imports torch once, loads the collector state from STATE, then forks one writer per FOLDER: each runs the real
`write_checkpoint(FOLDER/collector.pt, state)` and stops at its POINT, prints `<pid> <POINT>` and waits there for the
test's SIGKILL. Points: `bytes:N` (N bytes of the temporary file written and flushed), `fsync` (the temporary file
complete, before its fsync), `replace` (before the rename), `dir_fsync` (renamed, before the folder's fsync),
`written` (write_checkpoint returned). Once every writer has ended, prints `<pid> exit <code>` for each.
"""

import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

import torch

from nemo_gym.experience.collector import checkpoint as collector_checkpoint

CHECKPOINT_NAME = "collector.pt"


def _stop(point: str) -> NoReturn:
    """Say where this writer stands, then wait for the SIGKILL."""
    os.write(1, f"{os.getpid()} {point}\n".encode())
    while True:
        signal.pause()


class _StopAfter:
    """The temporary file, stopping the writer once `limit` bytes of it are on disk."""

    def __init__(self, file: Any, limit: int, point: str) -> None:
        self._file, self._left, self._point = file, limit, point

    def write(self, data: Any) -> int:
        data = memoryview(data).cast("B")
        if len(data) < self._left:
            self._left -= len(data)
            return self._file.write(data)
        self._file.write(data[: self._left])
        self._file.flush()
        _stop(self._point)

    def __enter__(self) -> "_StopAfter":
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def _stop_before(name: str, point: str) -> None:
    """Stop the writer at its first call of os.`name`."""
    def stopped(*args: Any, **kwargs: Any) -> NoReturn:
        _stop(point)
    setattr(os, name, stopped)


def _arm(point: str) -> None:
    kind, _, limit = point.partition(":")
    if kind == "bytes":
        real_open: Callable[..., Any] = open
        collector_checkpoint.open = lambda *args, **kwargs: _StopAfter(real_open(*args, **kwargs), int(limit), point)
    elif kind in ("fsync", "replace"):
        _stop_before(kind, point)
    elif kind == "dir_fsync":
        _stop_before("open", point)  # write_checkpoint opens the folder for its fsync only after the rename
    elif kind != "written":
        raise SystemExit(f"unknown point {point!r}")


def main() -> None:
    state = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
    writers = []
    for spec in sys.argv[2:]:
        folder, point = spec.split("=", 1)
        pid = os.fork()
        if pid == 0:
            _arm(point)
            collector_checkpoint.write_checkpoint(Path(folder) / CHECKPOINT_NAME, state)
            _stop(point)
        writers.append(pid)
    for pid in writers:
        _, status = os.waitpid(pid, 0)
        os.write(1, f"{pid} exit {os.waitstatus_to_exitcode(status)}\n".encode())


if __name__ == "__main__":
    main()
