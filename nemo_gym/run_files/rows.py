"""Lines of a run's JSONL files, read or written whole, and the key of a rollout line.

A rollout is identified by (task index, rollout index): the row fields `run_format.TASK_INDEX` and
`ROLLOUT_INDEX`. Our writers put the two keys first (`keyed`), so reading a key needs no full JSON parse.
"""

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Generator, Iterator

import orjson

from nemo_gym.run_format import ROLLOUT_INDEX, TASK_INDEX

_KEY_PREFIX = re.compile(rb'\{"%s":(\d+),"%s":(\d+)[,}]' % (TASK_INDEX.encode(), ROLLOUT_INDEX.encode()))


def row_key(line: bytes) -> tuple[int, int] | None:
    """The key of one JSONL line, or None when the line is not a JSON object holding both integer keys."""
    match = _KEY_PREFIX.match(line)
    if match:
        return int(match.group(1)), int(match.group(2))
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(row, dict):
        return None
    task, rollout = row.get(TASK_INDEX), row.get(ROLLOUT_INDEX)
    if type(task) is not int or type(rollout) is not int:
        return None
    return task, rollout


def keyed(task: int, rollout: int, row: dict) -> dict:
    """`row` with the two keys first (so `row_key` reads them without parsing) and set to their true values."""
    out = {TASK_INDEX: task, ROLLOUT_INDEX: rollout}
    out.update(row)
    out[TASK_INDEX] = task
    out[ROLLOUT_INDEX] = rollout
    return out


def iter_lines(path: Path, missing_ok: bool = False) -> Generator[tuple[int, int, bytes], None, None]:
    """(line number, byte offset, line) for every non-blank line of `path`; with `missing_ok`, a missing file has
    none."""
    if missing_ok and not path.is_file():
        return
    offset = 0
    with open(path, "rb") as file:
        for line_no, line in enumerate(file, start=1):
            if not line.isspace():
                yield line_no, offset, line
            offset += len(line)


@contextmanager
def replacing_lines(dest: Path) -> Iterator[Callable[[bytes], object]]:
    """A writer of `dest`'s lines: `dest` is replaced (atomically) when the block ends without an error, so a write
    stopped half way leaves `dest` as it was."""
    tmp = dest.with_name(dest.name + ".tmp")
    try:
        with open(tmp, "wb", buffering=1 << 20) as out:
            yield out.write
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def count_rows(path: Path, limit: int | None = None) -> int:
    """Non-blank lines of `path`, at most `limit`."""
    count = 0
    for _ in iter_lines(path):
        if limit is not None and count >= limit:
            break
        count += 1
    return count


def line_number_at(path: Path, offset: int) -> int:
    """1-based line of the byte at `offset` (for an error message about a line found by its offset)."""
    count = 0
    with open(path, "rb") as file:
        while offset > 0:
            chunk = file.read(min(offset, 1 << 20))
            if not chunk:
                break
            count += chunk.count(b"\n")
            offset -= len(chunk)
    return count + 1
