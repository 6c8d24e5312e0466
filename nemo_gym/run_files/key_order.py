"""Rollout files read in key order: every key once, over any number of shard files (aggregation, merging, the viewer).

Shards are written in completion order, so key order needs an index: one (task, rollout, file, offset, length)
entry of 40 bytes per row, never the rows, sorted in memory for up to 262,144 rows and as an external merge sort
(sorted runs on disk, merged a block at a time) beyond that. Rows are then read back one at a time by offset. A key
found in two places is dropped when both lines hold the same rollout (a shard re-run after a requeue), and is an
error naming both files when they differ: then the shards come from different runs and no merge is right.
"""

import os
import tempfile
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, Iterator, NamedTuple, Sequence

import numpy as np
import orjson

from nemo_gym.errors import InputDataError
from nemo_gym.run_files.rows import iter_lines, row_key
from nemo_gym.run_format import ROLLOUT_INDEX, TASK_INDEX

_BLOCK = 1 << 16  # index entries turned into Python ints at a time
_RUN_ROWS = 1 << 18  # index entries sorted in memory (10 MiB); more rows are sorted in runs of this size on disk
_MERGE_BLOCK = 1 << 14  # entries read from each run at a time while merging
_ENTRY = np.dtype([("task", "<i8"), ("rollout", "<i8"), ("file", "<i8"), ("offset", "<i8"), ("length", "<i8")])


@dataclass
class ReadStats:
    rows: int = 0
    duplicates: int = 0  # identical copies dropped
    duplicate_files: set[str] = field(default_factory=set)


_ORDER = ("task", "rollout", "file", "offset")  # index order: key order, then the first copy of a key first


def _sort(entries: np.ndarray) -> np.ndarray:
    return entries[np.lexsort([entries[name] for name in reversed(_ORDER)])]


def _at_most(entries: np.ndarray, bound: np.void) -> int:
    """How many of the sorted `entries` are <= `bound` in (task, rollout, file, offset) order (they are a prefix)."""
    t, r, f, o = entries["task"], entries["rollout"], entries["file"], entries["offset"]
    bt, br, bf, bo = bound["task"], bound["rollout"], bound["file"], bound["offset"]
    before = (t < bt) | ((t == bt) & ((r < br) | ((r == br) & ((f < bf) | ((f == bf) & (o <= bo))))))
    return int(before.sum())


class _KeyIndex:
    """(task, rollout, file, offset, length) of every row, sorted: in memory up to _RUN_ROWS rows, beyond that as
    sorted runs in `work_dir` merged on the way out, so memory stays flat however many rows there are."""

    def __init__(self, files: Sequence[Path], work_dir: Path | None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="ng_index_", dir=work_dir)
        self._runs: list[Path] = []
        self._last = np.empty(0, _ENTRY)
        entries = array("q")  # the five fields of each entry in a row: one extend per line
        for file_no, path in enumerate(files):
            for line_no, offset, line in iter_lines(path):
                key = row_key(line)
                if key is None:
                    raise InputDataError(f"{path}:{line_no}: not a rollout row (no {TASK_INDEX}/{ROLLOUT_INDEX})")
                entries.extend((key[0], key[1], file_no, offset, len(line)))
                if len(entries) >= 5 * _RUN_ROWS:
                    self._spill(entries)
                    entries = array("q")
        if not self._runs:
            self._last = _sort(np.frombuffer(entries, _ENTRY))
        elif len(entries):
            self._spill(entries)

    def _spill(self, entries: array) -> None:
        path = Path(self._dir.name) / f"{len(self._runs)}.run"
        _sort(np.frombuffer(entries, _ENTRY)).tofile(path)
        self._runs.append(path)

    def blocks(self) -> Iterator[np.ndarray]:
        """Sorted entries, a block at a time."""
        if not self._runs:
            for start in range(0, len(self._last), _BLOCK):
                yield self._last[start:start + _BLOCK]
            return
        handles = [open(path, "rb") for path in self._runs]
        try:
            buffers = [np.fromfile(handle, _ENTRY, _MERGE_BLOCK) for handle in handles]
            drained = [len(buffer) < _MERGE_BLOCK for buffer in buffers]
            while any(len(buffer) for buffer in buffers):
                # Whatever is <= the smallest last entry of a run with more to read can be emitted now.
                pending = [buffer[-1] for buffer, done in zip(buffers, drained) if not done]
                bound = min(pending, key=lambda e: tuple(e[name] for name in _ORDER)) if pending else None
                ready = []
                for i, buffer in enumerate(buffers):
                    cut = len(buffer) if bound is None else _at_most(buffer, bound)
                    ready.append(buffer[:cut])
                    buffers[i] = buffer[cut:]
                    if not len(buffers[i]) and not drained[i]:
                        buffers[i] = np.fromfile(handles[i], _ENTRY, _MERGE_BLOCK)
                        drained[i] = len(buffers[i]) < _MERGE_BLOCK
                yield _sort(np.concatenate(ready))
        finally:
            for handle in handles:
                handle.close()

    def close(self) -> None:
        self._dir.cleanup()


def _same_rollout(a: bytes, b: bytes) -> bool:
    return a.rstrip() == b.rstrip() or orjson.loads(a) == orjson.loads(b)


class IndexedLine(NamedTuple):
    """One rollout line with where it lives: `files[file_no]` at byte `offset`, `length` bytes (a tuple: one is
    made per row, and a frozen dataclass costs several times as much to make)."""

    task: int
    rollout: int
    file_no: int
    offset: int
    length: int
    line: bytes


def iter_unique_entries(files: Sequence[Path], stats: ReadStats, work_dir: Path | None = None
                        ) -> Generator[IndexedLine, None, None]:
    """Every rollout line of `files` once with its location, ordered by (task, rollout); the first copy of a key
    wins. Sorted runs of the key index go to `work_dir` (default: the system's temporary folder) when there are many
    rows."""
    index = _KeyIndex(files, work_dir)
    # pread of exactly one line: a buffered seek + readline would refill an 8 KiB buffer for every row.
    fds = [os.open(path, os.O_RDONLY) for path in files]
    try:
        previous: tuple[int, int] | None = None
        kept_line, kept_file = b"", 0
        for block in index.blocks():
            for task, rollout, file_no, offset, length in zip(
                block["task"].tolist(), block["rollout"].tolist(), block["file"].tolist(),
                block["offset"].tolist(), block["length"].tolist(),
            ):
                line = os.pread(fds[file_no], length, offset)
                if (task, rollout) == previous:
                    if not _same_rollout(kept_line, line):
                        raise InputDataError(
                            f"rollout ({TASK_INDEX}={task}, {ROLLOUT_INDEX}={rollout}) differs between "
                            f"{files[kept_file]} and {files[file_no]}: these shards come from different runs"
                        )
                    stats.duplicates += 1
                    stats.duplicate_files.update((str(files[kept_file]), str(files[file_no])))
                    continue
                previous, kept_line, kept_file = (task, rollout), line, file_no
                stats.rows += 1
                yield IndexedLine(task, rollout, file_no, offset, length, line)
    finally:
        for fd in fds:
            os.close(fd)
        index.close()


def iter_unique_lines(files: Sequence[Path], stats: ReadStats,
                      work_dir: Path | None = None) -> Generator[bytes, None, None]:
    """Every rollout line of `files` once, ordered by (task, rollout), newline-terminated (`iter_unique_entries`)."""
    for entry in iter_unique_entries(files, stats, work_dir):
        yield entry.line if entry.line.endswith(b"\n") else entry.line + b"\n"
