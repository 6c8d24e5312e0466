"""Reading rollout files for aggregation: every key once, in key order, over any number of shard files.

Shards are written in completion order, so key order needs an index: one (task, rollout, file, offset, length)
entry of 32 bytes per row in numpy arrays, never the rows. Rows are then read back one at a time by offset. A key
found in two places is dropped when both lines hold the same rollout (a shard re-run after a requeue), and is an
error naming both files when they differ: then the shards come from different runs and no merge is right.
"""

import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import orjson

from nemo_gym.errors import InputDataError
from nemo_gym.rollout_collection.keys import AGENT_REF, row_key

FAILURES_SUFFIX = "_failures.jsonl"
_BLOCK = 1 << 16


@dataclass
class ReadStats:
    rows: int = 0
    duplicates: int = 0  # identical copies dropped
    duplicate_files: set[str] = field(default_factory=set)


def _index(files: Sequence[Path]) -> tuple[np.ndarray, ...]:
    tasks, rollouts, file_nos, offsets, lengths = array("q"), array("q"), array("i"), array("q"), array("i")
    for file_no, path in enumerate(files):
        offset = 0
        with open(path, "rb") as file:
            for line_no, line in enumerate(file, start=1):
                if line.strip():
                    key = row_key(line)
                    if key is None:
                        raise InputDataError(
                            f"{path}:{line_no}: not a rollout row (no _ng_task_index/_ng_rollout_index)"
                        )
                    tasks.append(key[0])
                    rollouts.append(key[1])
                    file_nos.append(file_no)
                    offsets.append(offset)
                    lengths.append(len(line))
                offset += len(line)
    return (np.frombuffer(tasks, np.int64), np.frombuffer(rollouts, np.int64), np.frombuffer(file_nos, np.int32),
            np.frombuffer(offsets, np.int64), np.frombuffer(lengths, np.int32))


def _same_rollout(a: bytes, b: bytes) -> bool:
    return a.rstrip() == b.rstrip() or orjson.loads(a) == orjson.loads(b)


def iter_unique_lines(files: Sequence[Path], stats: ReadStats) -> Iterator[bytes]:
    """Every rollout line of `files` once, ordered by (task, rollout); the first copy of a key wins."""
    tasks, rollouts, file_nos, offsets, lengths = _index(files)
    order = np.lexsort((offsets, file_nos, rollouts, tasks))
    # pread of exactly one line: a buffered seek + readline would refill an 8 KiB buffer for every row.
    fds = [os.open(path, os.O_RDONLY) for path in files]
    try:
        previous: tuple[int, int] | None = None
        kept_line, kept_file = b"", 0
        for start in range(0, len(order), _BLOCK):
            block = order[start:start + _BLOCK]  # Python ints for one block at a time, not for every row
            for task, rollout, file_no, offset, length in zip(
                tasks[block].tolist(), rollouts[block].tolist(), file_nos[block].tolist(),
                offsets[block].tolist(), lengths[block].tolist(),
            ):
                line = os.pread(fds[file_no], length, offset)
                if (task, rollout) == previous:
                    if not _same_rollout(kept_line, line):
                        raise InputDataError(
                            f"rollout (_ng_task_index={task}, _ng_rollout_index={rollout}) differs between "
                            f"{files[kept_file]} and {files[file_no]}: these shards come from different runs"
                        )
                    stats.duplicates += 1
                    stats.duplicate_files.update((str(files[kept_file]), str(files[file_no])))
                    continue
                previous, kept_line, kept_file = (task, rollout), line, file_no
                stats.rows += 1
                yield line if line.endswith(b"\n") else line + b"\n"
    finally:
        for fd in fds:
            os.close(fd)


def failures_sidecar(rollouts: Path) -> Path:
    return rollouts.with_name(f"{rollouts.stem}{FAILURES_SUFFIX}")


def read_failures(files: Sequence[Path]) -> dict[tuple[int, int], tuple[bytes, str, str]]:
    """Key -> (record line, agent, failure class) from the failures sidecars of `files`; the last record wins."""
    latest: dict[tuple[int, int], tuple[bytes, str, str]] = {}
    for rollouts in files:
        path = failures_sidecar(rollouts)
        if not path.is_file():
            continue
        with open(path, "rb") as file:
            for line in file:
                key = row_key(line)
                if key is None:
                    continue  # a torn last record loses only itself
                record = orjson.loads(line)
                agent = (record.get(AGENT_REF) or {}).get("name", "")
                latest[key] = (line if line.endswith(b"\n") else line + b"\n", agent,
                               str(record.get("failure_class", "unknown")))
    return latest
