"""A compact set of rollout keys (task index, rollout index); reading a key from a line is
`nemo_gym.run_files.rows.row_key`.

Resume needs "which keys are done" for up to millions of rollouts, so the set is a paged bitmap: one bit per key,
memory in kilobytes instead of the tens of megabytes a Python set of tuples would take.
"""

_PAGE_BITS = 1 << 15  # 4 KiB pages: dense runs cost 1 bit per key, sparse caller indices cost one page each


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
