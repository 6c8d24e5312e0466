"""Task indices and rollout indices for input rows, grouped the way NeMo Gym 0.4.0 groups them.

The rule: a row that sets `_ng_task_index` belongs to that task. A row without one belongs to the task of the first
earlier row without one whose line is identical (byte for byte; CRLF counts as LF); otherwise it opens the next
automatic index, counted 0, 1, 2, ... over distinct unindexed lines only. Rollout indices are counted per task
index across the whole file, so a line that appears twice with 4 repeats gets rollouts 0-3, then 4-7. Automatic
and caller indices share one counter per index: an automatic index equal to a caller's joins that task.

Rows that carry the same `_ng_task_index` must be one row, apart from their rollout bookkeeping (`SharedIndexCheck`):
NeMo Gym samples identical rows as one task, but two different rows under one index would be scored as one task.

Only 16-byte digests of lines are kept, never their text, and beyond `MEMORY_ENTRIES` entries they move to an
on-disk SQLite table, so memory stays flat however large the input is. Most rows are new lines of new tasks, so two
small in-memory filters answer "never seen" without a disk lookup: a fixed-size bitmap of digests (a one-hash
Bloom filter) and a bitmap of the task indices in use.
"""

import hashlib
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import orjson

from nemo_gym.rollout_collection.keys import KeySet
from nemo_gym.run_format import NUM_REPEATS, ROLLOUT_INDEX

MEMORY_ENTRIES = 1 << 16  # entries per map held in a dict before the map is written to disk
_FILTER_BITS = 1 << 26  # 8 MB: at a million distinct lines 1.5% of new lines still look them up on disk


class _SpillMap:
    """A map of bytes or int keys to ints: a dict until it holds `MEMORY_ENTRIES`, then a write-back cache over a
    SQLite table (one lookup per miss, batched writes)."""

    def __init__(self, db_path: Path, table: str) -> None:
        self._db_path = db_path
        self._table = table
        self._db: sqlite3.Connection | None = None
        self._recent: dict[Any, int] = {}

    def get(self, key: Any) -> int | None:
        value = self._recent.get(key)
        if value is None and self._db is not None:
            found = self._db.execute(f"SELECT v FROM {self._table} WHERE k = ?", (key,)).fetchone()
            value = None if found is None else found[0]
        return value

    def set(self, key: Any, value: int) -> None:
        self._recent[key] = value
        if len(self._recent) >= MEMORY_ENTRIES:
            self._spill()

    def _spill(self) -> None:
        if self._db is None:
            self._db = sqlite3.connect(self._db_path, isolation_level=None)
            for pragma in ("journal_mode=OFF", "synchronous=OFF", "cache_size=-8192", "temp_store=FILE"):
                self._db.execute(f"PRAGMA {pragma}")
            self._db.execute(f"CREATE TABLE {self._table} (k PRIMARY KEY, v INTEGER) WITHOUT ROWID")
        # One transaction per batch (autocommit would write pages per row), keys in order for B-tree locality.
        self._db.execute("BEGIN")
        self._db.executemany(f"INSERT OR REPLACE INTO {self._table} VALUES (?, ?)", sorted(self._recent.items()))
        self._db.execute("COMMIT")
        self._recent.clear()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class TaskGrouper:
    """Assigns (task index, first rollout index) to rows in file order; use as a context manager."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="ng_task_groups_")
        self._line_tasks = _SpillMap(Path(self._dir.name) / "lines.sqlite", "lines")
        self._next_rollout = _SpillMap(Path(self._dir.name) / "rollouts.sqlite", "rollouts")
        self._line_filter = bytearray(_FILTER_BITS // 8)
        self._used_tasks = KeySet(1)
        self._automatic = 0  # distinct unindexed lines so far
        self.tasks = 0  # distinct task indices so far
        self.repeated_rows = 0  # rows that joined an earlier row's task
        self.largest_task = 0  # the most rollouts any task has

    def task_index(self, line: bytes, given: int | None) -> int:
        """The task of a row: `given` (the row's `_ng_task_index`) when set, else by the row's line text."""
        if given is not None:
            return given
        # NeMo Gym compares lines as read in text mode: CRLF reads as LF, and a last line without one differs.
        text = line[:-2] + b"\n" if line.endswith(b"\r\n") else line
        digest = hashlib.blake2b(text, digest_size=16).digest()
        bit = int.from_bytes(digest[:8], "little") & (_FILTER_BITS - 1)
        byte, mask = bit >> 3, 1 << (bit & 7)
        maybe_seen = self._line_filter[byte] & mask
        self._line_filter[byte] |= mask
        task = self._line_tasks.get(digest) if maybe_seen else None
        if task is None:
            task = self._automatic
            self._automatic += 1
            self._line_tasks.set(digest, task)
        return task

    def take_rollouts(self, task: int, count: int) -> int:
        """Reserve `count` rollout indices of `task`; returns the first."""
        first = 0 if self._used_tasks.add(task, 0) else self._next_rollout.get(task) or 0
        if first:
            self.repeated_rows += 1
        else:
            self.tasks += 1
        self._next_rollout.set(task, first + count)
        self.largest_task = max(self.largest_task, first + count)
        return first

    def close(self) -> None:
        self._line_tasks.close()
        self._next_rollout.close()
        self._dir.cleanup()

    def __enter__(self) -> "TaskGrouper":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_BOOKKEEPING = (ROLLOUT_INDEX, NUM_REPEATS)  # may differ between the rows of one task


def row_digest(row: dict[str, Any]) -> int:
    """A signed 64-bit digest of a row's content (keys sorted, so key order and spacing do not count), without the
    fields that may differ between the rows of one task."""
    content = {key: value for key, value in row.items() if key not in _BOOKKEEPING}
    digest = hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class SharedIndexCheck:
    """Remembers the first row of every carried `_ng_task_index` (its digest and where it was, an int the caller
    chooses) and finds a later, different row that carries the same index; use as a context manager."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="ng_shared_index_")
        self._digests = _SpillMap(Path(self._dir.name) / "digests.sqlite", "digests")
        self._origins = _SpillMap(Path(self._dir.name) / "origins.sqlite", "origins")

    def differing_first(self, task: int, row: dict[str, Any], origin: int) -> int | None:
        """The origin of the first row that carried `task` when that row differs from `row`; None when `row` is the
        first or the same row."""
        digest = row_digest(row)
        first = self._digests.get(task)
        if first is None:
            self._digests.set(task, digest)
            self._origins.set(task, origin)
            return None
        return None if first == digest else self._origins.get(task)

    def close(self) -> None:
        self._digests.close()
        self._origins.close()
        self._dir.cleanup()

    def __enter__(self) -> "SharedIndexCheck":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
