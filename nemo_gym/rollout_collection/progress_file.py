"""`<stem>_progress.json`: where a run stands, for dashboards, Slurm monitors and `ng_status +output_jsonl_fpath=...`.

The collector replaces the whole file every `INTERVAL_S` seconds and once at the end: it writes a temporary file
next to it and renames it over the old one, so a reader sees the old version or the new one, complete, never a
part of either; a collector killed at any moment (kill -9 included) leaves a complete file. The fields are
documented in docs/collection.md ("The progress file").
"""

import os
import socket
from pathlib import Path
from typing import Any

import orjson

from nemo_gym.errors import InputDataError

FORMAT = 1
INTERVAL_S = 2.0
# A running collector's file older than this many intervals means the collector is gone (killed, or its node died).
STALE_INTERVALS = 15

RUNNING, PAUSED, FINISHED, STOPPED, INTERRUPTED = "running", "paused", "finished", "stopped", "interrupted"


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def remove_stale_temporaries(path: Path) -> None:
    """Remove what killed writers left next to `path` (a temporary file that never became the progress file)."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        if stale != _temporary(path):
            stale.unlink(missing_ok=True)


def write_progress(path: Path, snapshot: dict[str, Any]) -> None:
    """Replace `path` with `snapshot` in one step (see the module docstring)."""
    data = orjson.dumps({"format": FORMAT, "host": socket.gethostname(), "pid": os.getpid(), **snapshot},
                        option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    tmp = _temporary(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_progress(path: Path) -> dict[str, Any]:
    """The snapshot in `path`; InputDataError naming the file when there is none or it is not one."""
    try:
        snapshot = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise InputDataError(f"no progress file {path}: no collection into that output has started (or it "
                             f"finished before this version wrote progress files)") from None
    except orjson.JSONDecodeError as exc:
        raise InputDataError(f"{path} is not a progress file: {exc}") from None
    if not isinstance(snapshot, dict) or snapshot.get("format") != FORMAT:
        raise InputDataError(f"{path} is not a progress file of format {FORMAT}")
    return snapshot
