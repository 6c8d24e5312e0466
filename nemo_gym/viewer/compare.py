"""Two runs of the same tasks, task by task: which tasks' mean reward changed, and by how much.

Both tasks tables are in task order, so they are joined a block of A's tasks at a time against the matching slice
of B's (found by binary search): memory stays a few blocks whatever the number of tasks.
"""

from dataclasses import dataclass

import numpy as np

from nemo_gym.viewer.columns import SCAN_ROWS
from nemo_gym.viewer.errors import ViewerError
from nemo_gym.viewer.index import RunIndex

DIRECTIONS = ("all", "worse", "better")
ORDERS = ("task", "delta")
TOLERANCE = 1e-9


@dataclass(frozen=True)
class ChangedTask:
    task: int
    mean_a: float
    mean_b: float
    rollouts_a: int
    rollouts_b: int

    @property
    def delta(self) -> float:
        return self.mean_b - self.mean_a


@dataclass
class Comparison:
    changed: list[ChangedTask]  # the page asked for
    total_changed: int
    worse: int
    better: int
    common: int  # tasks in both runs
    only_a: int
    only_b: int


def _join(a: RunIndex, b: RunIndex):
    """Blocks of (task, mean A, mean B, rollouts A, rollouts B) for the tasks both runs hold, in task order."""
    b_tasks = b.tasks.mapped("task")
    for start, cols in a.tasks.chunks(("task", "mean_reward", "count"), SCAN_ROWS):
        tasks = cols["task"]
        lo = int(np.searchsorted(b_tasks, tasks[0]))
        hi = int(np.searchsorted(b_tasks, tasks[-1], side="right"))
        b_slice = {name: b.tasks.read(name, lo, hi - lo) for name in ("task", "mean_reward", "count")}
        common, ia, ib = np.intersect1d(tasks, b_slice["task"], assume_unique=True, return_indices=True)
        yield (common, cols["mean_reward"][ia], b_slice["mean_reward"][ib], cols["count"][ia],
               b_slice["count"][ib])


def compare_runs(a: RunIndex, b: RunIndex, direction: str = "all", order: str = "task", offset: int = 0,
                 limit: int = 50) -> Comparison:
    """Tasks whose mean reward differs between `a` and `b` (a task with no scored rollout in one run counts as
    changed when the other has one), page [offset, offset + limit) in `order`."""
    if direction not in DIRECTIONS or order not in ORDERS:
        raise ViewerError(f"direction must be one of {DIRECTIONS} and order one of {ORDERS}")
    wanted = offset + limit
    worse = better = common = changed_total = 0
    kept: list[np.ndarray] = []
    for tasks, mean_a, mean_b, count_a, count_b in _join(a, b):
        common += len(tasks)
        delta = np.where(np.isnan(mean_a) | np.isnan(mean_b), np.nan, mean_b - mean_a)
        scored_change = np.isnan(mean_a) != np.isnan(mean_b)
        is_worse = (delta < -TOLERANCE) | (scored_change & np.isnan(mean_b))
        is_better = (delta > TOLERANCE) | (scored_change & np.isnan(mean_a))
        worse += int(is_worse.sum())
        better += int(is_better.sum())
        pick = {"all": is_worse | is_better, "worse": is_worse, "better": is_better}[direction]
        changed_total += int(pick.sum())
        block = np.stack([tasks[pick].astype(np.float64), mean_a[pick], mean_b[pick], count_a[pick].astype(
            np.float64), count_b[pick].astype(np.float64), np.nan_to_num(delta[pick], nan=0.0)])
        kept.append(block)
        merged = np.concatenate(kept, axis=1)
        if order == "delta":  # largest drops first, then task order
            merged = merged[:, np.lexsort((merged[0], merged[5]))]
        kept = [merged[:, :wanted]]
    page = np.concatenate(kept, axis=1)[:, offset:wanted] if kept else np.empty((6, 0))
    changed = [ChangedTask(int(t), float(ma), float(mb), int(ca), int(cb)) for t, ma, mb, ca, cb, _ in page.T]
    return Comparison(changed, changed_total, worse, better, common, a.meta["tasks"] - common,
                      b.meta["tasks"] - common)
