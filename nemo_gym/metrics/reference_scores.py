"""NeMo Gym's pass@k family under its own names, counted block by block in memory flat in the number of tasks.

NeMo Gym environments that report pass@k (through its `compute_pass_majority_metrics`, score `accuracy` = reward)
emit, in percent (0-100), for every k from 1 to the largest task:
- `pass@{k}/accuracy`: over tasks with at least k rollouts, 1 - C(n-c, k)/C(n, k) when every reward is 0 or 1,
  otherwise the best of the task's first k rewards;
- `pass@1[avg-of-{k}]/accuracy`: over all tasks, the mean of the task's first k rewards (fewer if it has fewer);
- `pass@1[avg-of-{k}]/accuracy/std_dev_across_runs` and `.../std_err_across_runs` (k >= 2): the sample std (and
  std / sqrt(k)) of the k per-rollout-index scores, score i being the mean over tasks of their i-th reward.
Ours (`pass@{k}`, `pass@1[avg-of-N]`) stay alongside: 0-1, a correct rollout is reward >= 1, k on a 1, 2, 4 ladder.
Rollouts without a finite reward are left out.
"""

import math

import numpy as np

from nemo_gym.metrics.estimators import pass_at_ks

SCORE = "accuracy"


class ReferenceScores:
    """Per-k and per-rollout-index sums, grown to the largest task seen; fed whole tasks in key order."""

    def __init__(self) -> None:
        self.binary = True
        self._best_sums = np.zeros(0)  # k-1 -> sum over tasks with >= k rollouts of their best of the first k
        self._best_tasks = np.zeros(0, dtype=np.int64)
        self._avg_sums = np.zeros(0)  # k-1 -> sum over all tasks of the mean of their first k rewards
        self._tasks = 0
        self._index_sums = np.zeros(0)  # i -> sum over tasks of their i-th reward
        self._index_tasks = np.zeros(0, dtype=np.int64)

    def _grow(self, width: int) -> None:
        if width <= len(self._avg_sums):
            return
        extra = width - len(self._avg_sums)
        # Tasks seen so far have fewer rollouts than any new k: their mean over the first k is their full mean.
        last = self._avg_sums[-1] if len(self._avg_sums) else 0.0
        self._avg_sums = np.r_[self._avg_sums, np.full(extra, last)]
        self._best_sums = np.r_[self._best_sums, np.zeros(extra)]
        self._best_tasks = np.r_[self._best_tasks, np.zeros(extra, dtype=np.int64)]
        self._index_sums = np.r_[self._index_sums, np.zeros(extra)]
        self._index_tasks = np.r_[self._index_tasks, np.zeros(extra, dtype=np.int64)]

    def add_block(self, rewards: np.ndarray, group_of_row: np.ndarray) -> None:
        """One block of whole tasks in key order: `rewards` per row (NaN = none) and the row's task number."""
        valid = np.isfinite(rewards)
        rewards, group_of_row = rewards[valid], group_of_row[valid]
        if not len(rewards):
            return
        self.binary = self.binary and bool(np.all((rewards == 0.0) | (rewards == 1.0)))
        # A rollout's place among its task's scored rollouts, as NeMo Gym's per-task score list has it.
        tasks, starts, sizes = np.unique(group_of_row, return_index=True, return_counts=True)
        ranks = np.arange(len(rewards)) - np.repeat(starts, sizes)
        width = int(sizes.max())
        self._grow(width)
        self._tasks += len(tasks)
        total_so_far = np.zeros(len(tasks))
        for k in range(1, len(self._avg_sums) + 1):
            first = ranks < k
            if k <= width:
                in_k = np.add.reduceat(np.where(first, rewards, 0.0), starts)
                total_so_far = in_k
                best = np.maximum.reduceat(np.where(first, rewards, -np.inf), starts)
                full = sizes >= k
                self._best_sums[k - 1] += float(best[full].sum())
                self._best_tasks[k - 1] += int(full.sum())
            self._avg_sums[k - 1] += float((total_so_far / np.minimum(sizes, k)).sum())
        np.add.at(self._index_sums, ranks, rewards)
        np.add.at(self._index_tasks, ranks, 1)

    def metrics(self, outcomes_n: np.ndarray, outcomes_c: np.ndarray, outcome_tasks: np.ndarray) -> dict[str, float]:
        """The names above; `outcomes_*` are the (scored, correct) pairs and task counts pass@k already keeps."""
        out: dict[str, float] = {}
        if not self._tasks:
            return out
        ladder = pass_at_ks(outcomes_n, outcomes_c, range(1, len(self._avg_sums) + 1))
        for k in range(1, len(self._avg_sums) + 1):
            if self.binary:
                _, per_outcome = next(ladder)
                usable = np.isfinite(per_outcome)
                if outcome_tasks[usable].sum():
                    out[f"pass@{k}/{SCORE}"] = 100.0 * float(
                        (per_outcome[usable] * outcome_tasks[usable]).sum() / outcome_tasks[usable].sum())
            elif self._best_tasks[k - 1]:
                out[f"pass@{k}/{SCORE}"] = 100.0 * float(self._best_sums[k - 1]) / int(self._best_tasks[k - 1])
            out[f"pass@1[avg-of-{k}]/{SCORE}"] = 100.0 * float(self._avg_sums[k - 1]) / self._tasks
        runs = 100.0 * self._index_sums / np.maximum(self._index_tasks, 1)
        # The sample std of every prefix of `runs` in one pass (Welford's update), not one numpy call per k.
        mean = squares = 0.0
        for k, score in enumerate(runs.tolist(), start=1):
            delta = score - mean
            mean += delta / k
            squares += delta * (score - mean)
            if k >= 2:
                std = math.sqrt(squares / (k - 1))
                out[f"pass@1[avg-of-{k}]/{SCORE}/std_dev_across_runs"] = std
                out[f"pass@1[avg-of-{k}]/{SCORE}/std_err_across_runs"] = std / math.sqrt(k)
        return out
