"""Per-agent metrics over a stream of rollout rows, kept as flat numeric columns.

Why columns and not running sums: medians, per-task statistics, pass@k, majority@k and the bootstrap all need the
values themselves. A column holds 8 bytes per value (an `array('d')`, not Python floats at 32 bytes each), so 1M
rollouts with 5 numeric fields cost about 56 MB including the keys — exact medians, no sketch error. Everything is
computed at the end with numpy over rows in key order, so the numbers do not depend on the order rows were written
in: live aggregation and ng_aggregate_rollouts over the same rows agree to the last bit.
"""

import math
from array import array
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from nemo_gym.metrics.estimators import bootstrap_ci, k_ladder, majority_at_k, pass_at_k

TASK_INDEX = "_ng_task_index"
ROLLOUT_INDEX = "_ng_rollout_index"
INTERNAL_PREFIX = "_ng_"
REWARD = "reward"
EXTRACTED_ANSWER = "extracted_answer"
CORRECT_REWARD = 1.0  # a rollout counts as correct for pass@k when its reward reaches full credit
STATS = ("mean", "std", "min", "max", "median")
HISTOGRAM_BINS = 20
# Strings up to this length travel to the environment's metrics hook (labels, categories, extracted answers);
# longer ones are transcripts, which the hook does not get.
COMPACT_STRING_CHARS = 256
_NUMBER_TYPES = frozenset({float, int, bool})
_BLOCK_ROWS = 1 << 16  # rows per block of per-task statistics: bounds numpy temporaries to a few MB


@dataclass
class AgentMetrics:
    """The finished metrics of one agent: the flat `agent_metrics`, per-task rows and the data plots need."""

    agent_metrics: dict[str, float]
    group_columns: dict[str, np.ndarray] = field(default_factory=dict)  # per-task statistics, one array per name
    reward_histogram: tuple[list[float], list[int]] = ([], [])  # bin edges, counts
    pass_at_k: dict[int, float] = field(default_factory=dict)


class AgentColumns:
    """Collects one agent's rollouts (fed in key order, each key once) as numeric columns."""

    def __init__(self) -> None:
        self.rows = 0
        self.tasks = array("q")
        self.columns: dict[str, array] = {}
        self.answers = array("q")  # id of the extracted answer, -1 when there is none
        self._answer_ids: dict[str, int] = {}  # of the current task

    def add(self, row: dict[str, Any]) -> None:
        """Record `row`: its task, every numeric field and its extracted answer (this runs once per rollout, so
        non-finite values are masked later, in `_column`, with numpy)."""
        n = self.rows
        columns = self.columns
        for key, value in row.items():
            if type(value) in _NUMBER_TYPES and not key.startswith(INTERNAL_PREFIX):
                column = columns.get(key)
                if column is None:
                    column = columns[key] = array("d")
                if len(column) != n:
                    column.extend(array("d", [math.nan]) * (n - len(column)))
                try:
                    column.append(value)
                except OverflowError:  # an int beyond float range
                    column.append(math.nan)
        task = row[TASK_INDEX]
        if n and task != self.tasks[-1]:
            self._answer_ids.clear()  # votes are counted within a task, so ids need only be unique within one
        answer = row.get(EXTRACTED_ANSWER)
        self.answers.append(-1 if answer is None else self._answer_ids.setdefault(str(answer), len(self._answer_ids)))
        self.tasks.append(task)
        self.rows = n + 1

    def finish(self, failures_by_class: dict[str, int] | None = None) -> AgentMetrics:
        """Every statistic; per-task ones a block of whole tasks at a time, so temporaries stay a few megabytes."""
        tasks = np.frombuffer(self.tasks, dtype=np.int64)
        total = len(tasks)
        starts = np.flatnonzero(np.r_[True, tasks[1:] != tasks[:-1]]) if total else np.array([], np.int64)
        names = sorted(self.columns)
        columns = {name: self._column(name) for name in names}
        metrics: dict[str, float] = {"num_rollouts": float(self.rows), "num_tasks": float(len(starts))}
        for name in names:
            metrics.update(_overall(name, columns[name]))
        parts: dict[str, list[np.ndarray]] = {}
        for lo, hi, local_starts, group_of_row in _task_blocks(starts, total):
            for name in names:
                for stat, per_task in _per_task(_finite(columns[name][lo:hi]), local_starts, group_of_row).items():
                    parts.setdefault(f"{stat}/{name}", []).append(per_task)
        result = AgentMetrics(metrics)
        result.group_columns = {TASK_INDEX: tasks[starts], "num_rollouts": np.diff(np.r_[starts, total]),
                                **{name: np.concatenate(arrays) for name, arrays in parts.items()}}
        if REWARD in columns and np.isfinite(columns[REWARD]).any():
            self._reward_metrics(result, columns[REWARD], starts)
        failed = sum((failures_by_class or {}).values())
        metrics["num_failed"] = float(failed)
        metrics["failure_rate"] = failed / (self.rows + failed) if self.rows + failed else 0.0
        for failure_class, count in sorted((failures_by_class or {}).items()):
            metrics[f"num_failed/{failure_class}"] = float(count)
            metrics[f"failure_rate/{failure_class}"] = count / (self.rows + failed)
        return result

    def _column(self, name: str) -> np.ndarray:
        """The raw column, NaN-padded to every row (non-finite values still in it)."""
        column = self.columns[name]
        if len(column) < self.rows:
            column.extend(array("d", [math.nan]) * (self.rows - len(column)))
        return np.frombuffer(column, dtype=np.float64)

    def _reward_metrics(self, result: AgentMetrics, rewards: np.ndarray, starts: np.ndarray) -> None:
        """pass@k, pass@1[avg-of-k], majority@k, the bootstrap interval and the histogram; all from rewards."""
        metrics = result.agent_metrics
        n_parts, c_parts, sum_parts = [], [], []
        for lo, hi, local_starts, _ in _task_blocks(starts, len(rewards)):
            block = rewards[lo:hi]
            valid = np.isfinite(block)
            n_parts.append(np.add.reduceat(valid.astype(np.int64), local_starts))
            c_parts.append(np.add.reduceat((valid & (block >= CORRECT_REWARD)).astype(np.int64), local_starts))
            sum_parts.append(np.add.reduceat(np.where(valid, block, 0.0), local_starts))
        n, c, sums = np.concatenate(n_parts), np.concatenate(c_parts), np.concatenate(sum_parts)
        scored = n > 0
        max_n = int(n.max())
        for k in k_ladder(max_n):
            per_task = pass_at_k(n[scored], c[scored], k)
            used = int(np.isfinite(per_task).sum())
            result.pass_at_k[k] = float(np.nanmean(per_task)) if used else math.nan
            metrics[f"pass@{k}"] = result.pass_at_k[k]
            metrics[f"pass@{k}/num_tasks"] = float(used)
        metrics[f"pass@1[avg-of-{max_n}]"] = float(np.mean(c[scored] / n[scored]))
        if (np.frombuffer(self.answers, dtype=np.int64) >= 0).any():
            metrics.update(self._majority(rewards, starts, max_n))
        low, high = bootstrap_ci(sums[scored], n[scored])
        metrics[f"ci95_low/{REWARD}"] = low
        metrics[f"ci95_high/{REWARD}"] = high
        finite = rewards[np.isfinite(rewards)]
        low_edge, high_edge = float(finite.min()), float(finite.max())
        if high_edge == low_edge:
            high_edge = low_edge + 1.0
        counts, edges = np.histogram(finite, bins=HISTOGRAM_BINS, range=(low_edge, high_edge))
        result.reward_histogram = (edges.tolist(), counts.tolist())

    def _majority(self, rewards: np.ndarray, starts: np.ndarray, max_n: int) -> dict[str, float]:
        """majority@k over each task's first k rollouts (key order); tasks with fewer than k rollouts are left out."""
        answers = np.frombuffer(self.answers, dtype=np.int64)
        ks = k_ladder(max_n)[1:]
        score_sums, used = dict.fromkeys(ks, 0.0), dict.fromkeys(ks, 0)
        for lo, hi, local_starts, group_of_row in _task_blocks(starts, len(answers)):
            sizes = np.diff(np.r_[local_starts, hi - lo])
            positions = np.arange(hi - lo) - local_starts[group_of_row]
            scores = np.nan_to_num(rewards[lo:hi], nan=0.0, posinf=0.0, neginf=0.0)
            for k in ks:
                score, block_used = majority_at_k(group_of_row, positions, answers[lo:hi], scores, sizes, k)
                if block_used:
                    score_sums[k] += score * block_used
                    used[k] += block_used
        out: dict[str, float] = {}
        for k in ks:
            if used[k]:
                out[f"majority@{k}"] = score_sums[k] / used[k]
                out[f"majority@{k}/num_tasks"] = float(used[k])
        return out


def _task_blocks(starts: np.ndarray, total: int,
                 rows: int = _BLOCK_ROWS) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """(first row, end row, task starts within the block, task number of each row) for blocks of whole tasks of
    about `rows` rows each (a task larger than that is a block of its own)."""
    first = 0
    while first < len(starts):
        lo = int(starts[first])
        end = max(first + 1, int(np.searchsorted(starts, lo + rows, side="left")))
        hi = int(starts[end]) if end < len(starts) else total
        local_starts = starts[first:end] - lo
        yield lo, hi, local_starts, np.repeat(np.arange(end - first), np.diff(np.r_[local_starts, hi - lo]))
        first = end


def _finite(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), values, math.nan)


def compact_row(row: dict[str, Any]) -> dict[str, Any]:
    """What an environment's metrics hooks get of a rollout: its keys and short scalar fields, no transcript."""
    compact: dict[str, Any] = {TASK_INDEX: row[TASK_INDEX], ROLLOUT_INDEX: row[ROLLOUT_INDEX]}
    for key, value in row.items():
        kind = type(value)
        if key.startswith(INTERNAL_PREFIX):
            continue
        if kind is float or kind is int or kind is bool or value is None or (
            kind is str and len(value) <= COMPACT_STRING_CHARS
        ):
            compact[key] = value
    return compact


def _overall(name: str, values: np.ndarray) -> dict[str, float]:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return {}
    return {
        f"mean/{name}": float(finite.mean()),
        f"std/{name}": float(finite.std()),
        f"min/{name}": float(finite.min()),
        f"max/{name}": float(finite.max()),
        f"median/{name}": float(np.median(finite)),
    }


def _per_task(values: np.ndarray, starts: np.ndarray, group_of_row: np.ndarray) -> dict[str, np.ndarray]:
    """mean/std/min/max/median of `values` within each task (NaN where a task has none), fully vectorised."""
    valid = np.isfinite(values)
    counts = np.add.reduceat(valid.astype(np.int64), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.add.reduceat(np.where(valid, values, 0.0), starts) / counts
        deviation = np.where(valid, values - mean[group_of_row], 0.0)
        std = np.sqrt(np.add.reduceat(deviation * deviation, starts) / counts)
    low = np.minimum.reduceat(np.where(valid, values, np.inf), starts)
    high = np.maximum.reduceat(np.where(valid, values, -np.inf), starts)
    # Sort by (task, value) with missing values last in each task; the median sits in the middle of the valid ones.
    ordered = values[np.lexsort((np.where(valid, values, np.inf), group_of_row))]
    lower = ordered[starts + np.maximum(counts - 1, 0) // 2]
    upper = ordered[starts + counts // 2]
    median = (lower + upper) / 2
    missing = counts == 0
    return {stat: np.where(missing, np.nan, array_) for stat, array_ in zip(STATS, (mean, std, low, high, median))}


def iter_groups(columns: dict[str, np.ndarray], block: int = 1 << 14) -> Iterator[dict[str, Any]]:
    """One dict per task from per-task columns, converted a block at a time (there can be a million tasks)."""
    names = list(columns)
    total = len(columns[TASK_INDEX]) if columns else 0
    for start in range(0, total, block):
        lists = [columns[name][start:start + block].tolist() for name in names]
        for values in zip(*lists):
            yield {name: value for name, value in zip(names, values) if value == value}  # NaN: no value
