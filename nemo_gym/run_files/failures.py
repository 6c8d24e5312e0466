"""Failure records (`<stem>_failures.jsonl`) and the one rule for reading them.

The collector appends a record each time a rollout fails a run, so a key can have several; the latest record of a
key is the one that counts, and a key that is done (its rollout is in an output) has no outstanding failure. A line
that does not parse (the torn last record of a killed run) loses only itself. Records are kept by location, not by
content, so memory stays small however long their lines are.
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson

from nemo_gym.run_files.rows import iter_lines, row_key
from nemo_gym.run_format import AGENT_REF, ATTEMPTS, FAILURE_CLASS, UNKNOWN_FAILURE_CLASS


@dataclass(frozen=True)
class FailureRecord:
    task: int
    rollout: int
    file: Path  # the failures sidecar that holds it
    offset: int
    length: int
    agent: str
    failure_class: str
    attempts: int | None  # attempts spent on the key across runs; None in a record written by something else


class KeyLookup(Protocol):
    """What answers `key in done` for (task, rollout) keys: a set, or the collector's KeySet."""

    def __contains__(self, key: tuple[int, int], /) -> bool: ...


def latest_failures(failure_files: Iterable[Path],
                    done: KeyLookup = ()) -> dict[tuple[int, int], FailureRecord]:
    """Key -> its latest failure record over `failure_files` (missing files have none), for keys not in `done`.

    Keys come in the order of their first record, so counts taken over the result are in a stable order."""
    latest: dict[tuple[int, int], FailureRecord] = {}
    for path in failure_files:
        for _, offset, line in iter_lines(path, missing_ok=True):
            key = row_key(line)
            if key is None or key in done:
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            agent = (record.get(AGENT_REF) or {}).get("name", "")
            attempts = record.get(ATTEMPTS)
            latest[key] = FailureRecord(key[0], key[1], path, offset, len(line), str(agent),
                                        str(record.get(FAILURE_CLASS, UNKNOWN_FAILURE_CLASS)),
                                        attempts if type(attempts) is int else None)
    return latest


def write_failures(path: Path, records: dict[tuple[int, int], FailureRecord]) -> None:
    """Replace `path` (atomically) by `records` in key order; remove it when there are none."""
    if not records:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(path.name + ".tmp")
    fds: dict[Path, int] = {}
    try:
        with open(tmp, "wb") as file:
            for key in sorted(records):
                record = records[key]
                fd = fds.get(record.file)
                if fd is None:
                    fd = fds[record.file] = os.open(record.file, os.O_RDONLY)
                line = os.pread(fd, record.length, record.offset)
                file.write(line if line.endswith(b"\n") else line + b"\n")
    finally:
        for fd in fds.values():
            os.close(fd)
    os.replace(tmp, path)
