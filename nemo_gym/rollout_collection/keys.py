"""Rollout keys and a compact set of them.

A rollout is identified by (task index, rollout index): the row fields `run_format.TASK_INDEX` and `ROLLOUT_INDEX`.
Resume needs "which keys are done" for up to millions of rollouts, so the set is a paged bitmap: one bit per key,
memory in kilobytes instead of the tens of megabytes a Python set of tuples would take.
"""

import re

import orjson

# The field names are nemo_gym.run_format's; importers of this module may take them from here.
from nemo_gym.run_format import AGENT_REF, CREATE_PARAMS, NUM_REPEATS, ROLLOUT_INDEX, TASK_INDEX  # noqa: F401

_PAGE_BITS = 1 << 15  # 4 KiB pages: dense runs cost 1 bit per key, sparse caller indices cost one page each
# Our own writers put the two keys first, so the common case needs no full JSON parse.
_KEY_PREFIX = re.compile(rb'\{"%s":(\d+),"%s":(\d+)[,}]' % (TASK_INDEX.encode(), ROLLOUT_INDEX.encode()))


class KeySet:
    """A set of (task index, rollout index) pairs with rollout index < `rollouts_per_task`."""

    def __init__(self, rollouts_per_task: int) -> None:
        self.rollouts_per_task = rollouts_per_task
        self._pages: dict[int, bytearray] = {}
        self._count = 0

    def fits(self, task: int, rollout: int) -> bool:
        return task >= 0 and 0 <= rollout < self.rollouts_per_task

    def _slot(self, task: int, rollout: int) -> tuple[int, int]:
        return divmod(task * self.rollouts_per_task + rollout, _PAGE_BITS)

    def add(self, task: int, rollout: int) -> bool:
        """Add a key; False when it was already present."""
        if not self.fits(task, rollout):
            raise ValueError(f"key ({task}, {rollout}) is outside this set ({self.rollouts_per_task} per task)")
        page_no, bit = self._slot(task, rollout)
        page = self._pages.get(page_no)
        if page is None:
            page = self._pages[page_no] = bytearray(_PAGE_BITS // 8)
        byte, mask = bit >> 3, 1 << (bit & 7)
        if page[byte] & mask:
            return False
        page[byte] |= mask
        self._count += 1
        return True

    def __contains__(self, key: tuple[int, int]) -> bool:
        if not self.fits(*key):
            return False
        page_no, bit = self._slot(*key)
        page = self._pages.get(page_no)
        return page is not None and bool(page[bit >> 3] & (1 << (bit & 7)))

    def __len__(self) -> int:
        return self._count


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
