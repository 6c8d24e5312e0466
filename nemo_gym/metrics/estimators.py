"""Statistical estimators over per-task rollout counts: pass@k, majority@k and a bootstrap confidence interval.

Everything works on per-task arrays (rollouts `n`, correct `c`) so that tasks may have different numbers of
rollouts — after infrastructure failures some tasks have fewer — without biasing the result: each task uses its own
`n`, and a task with fewer than `k` rollouts cannot estimate pass@k at all, so it is left out of that k (the count
of tasks used is reported next to each value).
"""

import math
from typing import Iterable, Iterator

import numpy as np

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
# Above this many distinct (task sum, task count) pairs the bootstrap resamples task indices instead of categories.
CATEGORY_LIMIT = 4096
_RESAMPLE_BLOCK = 4_000_000  # indices drawn per block, to bound the bootstrap's memory


def k_ladder(max_n: int) -> list[int]:
    """1, 2, 4, ... up to `max_n`, plus `max_n` itself: the k values worth reporting for `max_n` rollouts per task."""
    ks = []
    k = 1
    while k <= max_n:
        ks.append(k)
        k *= 2
    if max_n >= 1 and ks[-1] != max_n:
        ks.append(max_n)
    return ks


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Per task, the unbiased estimate 1 - C(n-c, k) / C(n, k) of "at least one of k samples is correct".

    Only defined where n >= k; other tasks get NaN. The ratio of binomials is evaluated as the product
    prod_{i<k} (n-c-i)/(n-i), which never overflows (C(1000, 500) does not fit a float).
    """
    return next(pass_at_ks(n, c, (k,)))[1]


def pass_at_ks(n: np.ndarray, c: np.ndarray, ks: Iterable[int]) -> Iterator[tuple[int, np.ndarray]]:
    """(k, `pass_at_k(n, c, k)`) for each k of the ascending `ks`, from one running product: the same numbers, bit
    for bit, in k steps for the largest k instead of k steps for each (every k up to 1,667 took 16 s one by one)."""
    n = n.astype(np.float64)
    c = c.astype(np.float64)
    ratio = np.ones_like(n)
    done = 0
    for k in ks:
        for i in range(done, k):
            ratio *= np.where(n - c - i > 0, (n - c - i) / np.maximum(n - i, 1), 0.0)
        done = max(done, k)
        yield k, np.where(n >= k, 1.0 - ratio, np.nan)


def majority_at_k(groups: np.ndarray, positions: np.ndarray, answers: np.ndarray, rewards: np.ndarray,
                  task_sizes: np.ndarray, k: int) -> tuple[float, int]:
    """(majority@k, tasks used): per task with at least k rollouts, a vote over its first k rollouts.

    Per row: `groups` (task number 0..T-1), `positions` (place within its task), `answers` (answer id, -1 = none:
    abstains), `rewards`; per task `task_sizes`. The most frequent answer wins, ties go to the answer seen first,
    and the task scores the mean reward of the rollouts that gave it (0 when nobody answered). Vectorised: a
    million rollouts take well under a second.
    """
    used = int((task_sizes >= k).sum())
    if not used:
        return math.nan, 0
    voting = (positions < k) & (task_sizes[groups] >= k) & (answers >= 0)
    g, a, r, p = groups[voting], answers[voting], rewards[voting], positions[voting]
    if not len(g):
        return 0.0, used
    order = np.lexsort((p, a, g))
    g, a, r, p = g[order], a[order], r[order], p[order]
    pair_starts = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (a[1:] != a[:-1])])
    votes = np.diff(np.r_[pair_starts, len(g)])
    first_seen = p[pair_starts]
    pair_task = g[pair_starts]
    reward_sums = np.add.reduceat(r, pair_starts)
    ranked = np.lexsort((first_seen, -votes, pair_task))  # per task: most votes, then seen first
    winners = ranked[np.r_[True, pair_task[ranked][1:] != pair_task[ranked][:-1]]]
    return float((reward_sums[winners] / votes[winners]).sum() / used), used


def bootstrap_ci(task_sums: np.ndarray, task_counts: np.ndarray, level: float = 0.95,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean reward, resampling whole tasks (a cluster bootstrap).

    Tasks, not rollouts, are resampled because rollouts of one task are correlated: resampling rollouts would
    understate the uncertainty. A fixed seed makes the interval, and so the metrics file, reproducible.
    """
    pairs, weights = np.unique(np.stack([task_sums, task_counts.astype(np.float64)]), axis=1, return_counts=True)
    if pairs.shape[1] <= CATEGORY_LIMIT:
        return bootstrap_ci_of_categories(pairs[0], pairs[1], weights, level, resamples, seed)
    rng = np.random.default_rng(seed)
    tasks = len(task_sums)
    means = np.empty(resamples)
    block = max(1, _RESAMPLE_BLOCK // tasks)
    for start in range(0, resamples, block):
        size = min(block, resamples - start)
        picks = rng.integers(0, tasks, size=(size, tasks))
        means[start:start + size] = task_sums[picks].sum(axis=1) / task_counts[picks].sum(axis=1)
    return _percentiles(means, level)


def bootstrap_ci_of_categories(sums: np.ndarray, counts: np.ndarray, weights: np.ndarray, level: float = 0.95,
                               resamples: int = BOOTSTRAP_RESAMPLES,
                               seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """`bootstrap_ci` when tasks fall into few distinct (reward sum, rollout count) categories, as 0/1 rewards do:
    `weights` tasks have the sum `sums[i]` over `counts[i]` rollouts. Resampling tasks is then a multinomial draw
    over the categories, the same distribution at O(categories) cost and memory. Given the categories sorted by
    (sum, count), the interval equals `bootstrap_ci` over the tasks themselves."""
    tasks = int(weights.sum())
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(tasks, weights / tasks, size=resamples)
    return _percentiles((draws @ sums) / (draws @ counts), level)


def _percentiles(means: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)
