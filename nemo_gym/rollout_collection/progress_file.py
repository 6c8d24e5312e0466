"""`<stem>_progress.json`: where a run stands, for dashboards, Slurm monitors and `ng_status +output_jsonl_fpath=...`.

The collector replaces the whole file every `INTERVAL_S` seconds and once at the end: it writes a temporary file
next to it and renames it over the old one, so a reader sees the old version or the new one, complete, never a
part of either; a collector killed at any moment (kill -9 included) leaves a complete file. The fields are
documented in docs/collection.md ("The progress file").
"""

import os
import socket
import time
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


def is_stale(snapshot: dict[str, Any], now: float) -> bool:
    """A running (or paused) run whose collector has not replaced the file for STALE_INTERVALS intervals: gone."""
    return (snapshot.get("state") in (RUNNING, PAUSED)
            and now - float(snapshot.get("updated_at") or 0) > STALE_INTERVALS * INTERVAL_S)


def progress_ok(snapshot: dict[str, Any], now: float) -> bool:
    """Running and alive, or finished with nothing failed."""
    if is_stale(snapshot, now):
        return False
    return snapshot.get("state") in (RUNNING, PAUSED) or (snapshot.get("state") == FINISHED
                                                          and not snapshot.get("failed"))


def progress_lines(snapshot: dict[str, Any], now: float | None = None) -> list[str]:
    """The snapshot for a person (ng_status)."""
    now = time.time() if now is None else now
    state = str(snapshot.get("state"))
    age = now - float(snapshot.get("updated_at") or 0)
    if is_stale(snapshot, now):
        state = f"{state}, but not updated for {age:.0f} s: the collector (pid {snapshot.get('pid')} on " \
                f"{snapshot.get('host')}) is gone"
    eta = snapshot.get("eta_s")
    concurrency = snapshot.get("concurrency") or {}
    retries = snapshot.get("retries") or {}
    lines = [f"run: {snapshot.get('output')} ({state}; updated {age:.0f} s ago)",
             f"done: {snapshot.get('done')}/{snapshot.get('total')} ({snapshot.get('done_before')} before this run), "
             f"failed {snapshot.get('failed')}, in flight {snapshot.get('in_flight')} "
             f"(level {concurrency.get('level')} of {concurrency.get('ceiling')})",
             f"rate: {snapshot.get('rate_per_s')} rollouts/s" + (f", ETA {eta:.0f} s" if eta else "")
             + f"; 429s {snapshot.get('rate_limited')}, retries {retries.get('rollouts', 0)} rollouts "
               f"+ {retries.get('model_calls', 0)} model calls"]
    if snapshot.get("message"):
        lines.append(f"message: {snapshot['message']}")
    for name, counts in (snapshot.get("agents") or {}).items():
        lines.append(f"  {name}: {counts.get('succeeded')} succeeded, {counts.get('failed')} failed, "
                     f"{counts.get('in_flight')} in flight, {counts.get('rate_limited')} 429s")
    return lines
