"""Per-agent metrics over a stream of rollout rows, in constant memory however many rows there are.

Rows arrive in key order, so a task's rollouts are contiguous and a block of whole tasks can be summarised as soon
as the next task begins: per-task statistics go to a file as JSON lines, each numeric field's values to a file of
their own (`spill.ValueFile`: exact median without holding them). What pass@k and the bootstrap need is counted
per distinct outcome, not kept per task: tasks per (scored, correct) pair, and per (reward sum, scored) pair while
rewards take few values (0/1 rewards do; otherwise the per-task sums are read back from disk for the bootstrap).
majority@k is counted block by block. Blocks fall on the same rows whoever feeds them, so live aggregation and
ng_aggregate_rollouts over the same rows agree to the last bit.
"""

import math
import tempfile
from collections import Counter
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import orjson

from nemo_gym.metrics.call_metrics import CallAccumulator
from nemo_gym.metrics.estimators import (
    CATEGORY_LIMIT, bootstrap_ci, bootstrap_ci_of_categories, k_ladder, majority_at_k, pass_at_ks,
)
from nemo_gym.metrics.reference_scores import ReferenceScores
from nemo_gym.metrics.spill import ValueFile
from nemo_gym.run_format import INTERNAL_PREFIX, ROLLOUT_INDEX, TASK_INDEX

REWARD = "reward"
RESPONSE, USAGE = "response", "usage"
EXTRACTED_ANSWER = "extracted_answer"
CORRECT_REWARD = 1.0  # a rollout counts as correct for pass@k when its reward reaches full credit
STATS = ("mean", "std", "min", "max", "median")
HISTOGRAM_BINS = 20
# Strings up to this length travel to the environment's metrics hook (labels, categories, extracted answers);
# longer ones are transcripts, which the hook does not get.
COMPACT_STRING_CHARS = 256
_NUMBER_TYPES = frozenset({float, int, bool})
# Not *.jsonl: a recursive input glob must never pick up the work files of an interrupted aggregation.
GROUPS_FILE = "task_groups.lines"
_BLOCK_ROWS = 1 << 16  # rows held before a block of whole tasks is summarised: a few MB of numpy temporaries


@dataclass
class AgentMetrics:
    """The finished metrics of one agent: the flat `agent_metrics`, the per-task file and the data plots need."""

    agent_metrics: dict[str, float]
    groups_path: Path  # per-task statistics, one JSON object per line in task order (read with `iter_groups`)
    reward_histogram: tuple[list[float], list[int]] = ([], [])  # bin edges, counts
    pass_at_k: dict[int, float] = field(default_factory=dict)
    work_dir: Any = None  # the TemporaryDirectory holding `groups_path`: it lives as long as this result
    model_calls: list[dict[str, Any]] = field(default_factory=list)  # per endpoint (call_metrics.CallAccumulator)


class AgentAccumulator:
    """Collects one agent's rollouts, fed in key order and each key once; `finish` computes the metrics."""

    def __init__(self, work_dir: Path | None = None, failed_by_task: Mapping[int, int] | None = None) -> None:
        """`failed_by_task`: this agent's still-failed rollouts per task, final for a task once its rows are added."""
        self._dir = tempfile.TemporaryDirectory(prefix="ng_metrics_", dir=work_dir)
        self._groups = open(Path(self._dir.name) / GROUPS_FILE, "wb", buffering=1 << 20)
        self.rows = 0
        self.tasks = 0
        self._failed_by_task = failed_by_task or {}
        # The pending block: rows of tasks not yet summarised.
        self._tasks = array("q")
        self._columns: dict[str, array] = {}
        self._answers = array("q")  # answer id within its task, -1 when there is none
        self._answer_ids: dict[str, int] = {}  # of the current task
        # Kept for the whole run: every count is per distinct value, not per task, so memory stays flat.
        self._values: dict[str, ValueFile] = {}
        self._outcomes: Counter[tuple[int, int]] = Counter()  # (scored rollouts, correct ones) -> tasks
        self._categories: Counter[tuple[float, int]] | None = Counter()  # (reward sum, scored) -> tasks
        self._task_totals = ValueFile(Path(self._dir.name) / "task_totals.f64")  # reward sum, scored; per task
        self._largest_task = 0
        self._majority: dict[int, list[float]] = {}  # k -> [score sum, tasks used]
        self._reference = ReferenceScores()  # NeMo Gym's pass@k/accuracy family
        self._calls = CallAccumulator()  # the rows' per-call records

    def add(self, row: dict[str, Any]) -> None:
        """Record `row`: its task, every numeric field and its extracted answer (this runs once per rollout, so
        non-finite values are masked later, with numpy)."""
        task = row[TASK_INDEX]
        n = len(self._tasks)
        if n and task != self._tasks[-1]:
            self._answer_ids.clear()  # votes are counted within a task, so ids need only be unique within one
            if n >= _BLOCK_ROWS:
                self._flush()
                n = 0
        usage = row.get(RESPONSE)
        usage = usage.get(USAGE) if type(usage) is dict else None
        if type(usage) is dict and usage:  # token counts are fields of the rollout, as NeMo Gym counts them
            if any(key in row for key in usage):
                self._add_numbers({**row, **usage}.items(), n)  # a usage count replaces the row's own
            else:  # the usual case, without copying the row
                self._add_numbers(row.items(), n)
                self._add_numbers(usage.items(), n)
        else:
            self._add_numbers(row.items(), n)
        self._calls.add(row)
        answer = row.get(EXTRACTED_ANSWER)
        self._answers.append(-1 if answer is None else self._answer_ids.setdefault(str(answer), len(self._answer_ids)))
        self._tasks.append(task)
        self.rows += 1

    def _add_numbers(self, items: Iterable[tuple[str, Any]], n: int) -> None:
        """Append each numeric field of `items` to its column, the column padded with NaN up to row `n` first."""
        columns = self._columns
        for key, value in items:
            if type(value) in _NUMBER_TYPES:
                column = columns.get(key)
                if column is None:
                    if key.startswith(INTERNAL_PREFIX):
                        continue
                    column = columns[key] = array("d")
                if len(column) != n:
                    column.extend(array("d", [math.nan]) * (n - len(column)))
                try:
                    column.append(value)
                except OverflowError:  # an int beyond float range
                    column.append(math.nan)

    def _flush(self) -> None:
        """Summarise the pending block (whole tasks only: `add` flushes just before a new task starts)."""
        tasks = np.frombuffer(self._tasks, dtype=np.int64)
        total = len(tasks)
        if not total:
            return
        starts = np.flatnonzero(np.r_[True, tasks[1:] != tasks[:-1]])
        sizes = np.diff(np.r_[starts, total])
        group_of_row = np.repeat(np.arange(len(starts)), sizes)
        task_ids = tasks[starts]
        failed = np.array([self._failed_by_task.get(task, 0) for task in task_ids.tolist()], dtype=np.int64)
        expected = sizes + failed
        groups: dict[str, np.ndarray] = {TASK_INDEX: task_ids, "num_rollouts": sizes,
                                         "expected_num_rollouts": expected, "missing_num_rollouts": failed,
                                         "reward_profile_completion_pct": 100.0 * sizes / expected}
        rewards = None
        for name in sorted(self._columns):
            column = self._columns[name]
            if len(column) < total:
                column.extend(array("d", [math.nan]) * (total - len(column)))
            values = np.frombuffer(column, dtype=np.float64)
            values = np.where(np.isfinite(values), values, math.nan)
            if name not in self._values:
                self._values[name] = ValueFile(Path(self._dir.name) / f"{len(self._values)}.f64")
            self._values[name].append(values)
            for stat, per_task in _per_task(values, starts, group_of_row).items():
                groups[f"{stat}/{name}"] = per_task
            if name == REWARD:
                rewards = values
        _write_groups(self._groups, groups)
        if rewards is None:
            rewards = np.full(total, math.nan)
        self._reference.add_block(rewards, group_of_row)
        valid = np.isfinite(rewards)
        self._count_outcomes(rewards, valid, starts)
        answers = np.frombuffer(self._answers, dtype=np.int64)
        if (answers >= 0).any():
            self._count_majority(group_of_row, starts, sizes, answers, np.where(valid, rewards, 0.0))
        self._largest_task = max(self._largest_task, int(sizes.max()))
        self.tasks += len(starts)
        self._tasks, self._columns, self._answers = array("q"), {}, array("q")

    def _count_outcomes(self, rewards: np.ndarray, valid: np.ndarray, starts: np.ndarray) -> None:
        """Per scored task of the block, count its (scored, correct) outcome for pass@k and its (reward sum,
        scored) category for the bootstrap; the sums also go to disk, for when rewards take too many values."""
        scored = np.add.reduceat(valid.astype(np.int64), starts)
        correct = np.add.reduceat((valid & (rewards >= CORRECT_REWARD)).astype(np.int64), starts)
        sums = np.add.reduceat(np.where(valid, rewards, 0.0), starts)
        keep = scored > 0
        scored, correct, sums = scored[keep], correct[keep], sums[keep]
        self._outcomes.update(_pair_counts(scored, correct))
        if self._categories is not None:
            self._categories.update(_pair_counts(sums, scored))
            if len(self._categories) > CATEGORY_LIMIT:
                self._categories = None
        self._task_totals.append(np.stack([sums, scored.astype(np.float64)], axis=1).ravel())

    def _count_majority(self, group_of_row: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                        answers: np.ndarray, scores: np.ndarray) -> None:
        """Add this block's majority@k votes for every k the final ladder can hold: the final ladder is that of the
        run's largest task, so each of its k is either a power of two (counted in every block with a task that
        large) or that size itself (counted in the blocks holding such tasks; other blocks have none to count)."""
        positions = np.arange(len(answers)) - starts[group_of_row]
        largest = int(sizes.max())
        for k in k_ladder(largest)[1:]:
            score, used = majority_at_k(group_of_row, positions, answers, scores, sizes, k)
            if used:
                entry = self._majority.setdefault(k, [0.0, 0])
                entry[0] += score * used
                entry[1] += used

    def finish(self, failures_by_class: dict[str, int] | None = None) -> AgentMetrics:
        self._flush()
        self._groups.close()
        metrics: dict[str, float] = {"num_rollouts": float(self.rows), "num_tasks": float(self.tasks)}
        overall = {name: self._values[name].statistics() for name in sorted(self._values)}
        for name, stats in overall.items():
            metrics.update({f"{stat}/{name}": stats[stat] for stat in STATS if stat in stats})
        metrics.update(self._calls.metrics())
        result = AgentMetrics(metrics, Path(self._dir.name) / GROUPS_FILE, work_dir=self._dir,
                              model_calls=self._calls.table())
        if self._outcomes:
            self._reward_metrics(result, overall[REWARD])
        failed = sum((failures_by_class or {}).values())
        metrics["num_failed"] = float(failed)
        metrics["failure_rate"] = failed / (self.rows + failed) if self.rows + failed else 0.0
        for failure_class, count in sorted((failures_by_class or {}).items()):
            metrics[f"num_failed/{failure_class}"] = float(count)
            metrics[f"failure_rate/{failure_class}"] = count / (self.rows + failed)
        return result

    def close(self) -> None:
        """Remove the work files (the per-task file of a finished result included)."""
        self._groups.close()
        self._dir.cleanup()

    def _reward_metrics(self, result: AgentMetrics, reward_stats: dict[str, float]) -> None:
        """pass@k, pass@1[avg-of-k], majority@k, the bootstrap interval and the histogram."""
        metrics = result.agent_metrics
        outcomes = sorted(self._outcomes.items())
        n = np.array([scored for (scored, _), _ in outcomes])
        c = np.array([correct for (_, correct), _ in outcomes])
        tasks = np.array([count for _, count in outcomes])
        max_n = int(n.max())
        for k, per_outcome in pass_at_ks(n, c, k_ladder(max_n)):
            usable = np.isfinite(per_outcome)
            used = int(tasks[usable].sum())
            result.pass_at_k[k] = float((per_outcome[usable] * tasks[usable]).sum() / used) if used else math.nan
            metrics[f"pass@{k}"] = result.pass_at_k[k]
            metrics[f"pass@{k}/num_tasks"] = float(used)
        metrics[f"pass@1[avg-of-{max_n}]"] = float((tasks * c / n).sum() / tasks.sum())
        metrics.update(self._reference.metrics(n, c, tasks))
        for k in k_ladder(self._largest_task)[1:]:
            if k in self._majority:
                score_sum, scored = self._majority[k]
                metrics[f"majority@{k}"] = score_sum / scored
                metrics[f"majority@{k}/num_tasks"] = float(scored)
        if self._categories is not None:
            categories = sorted(self._categories.items())
            low, high = bootstrap_ci_of_categories(np.array([total for (total, _), _ in categories]),
                                                   np.array([float(scored) for (_, scored), _ in categories]),
                                                   np.array([count for _, count in categories]))
        else:  # rewards with many distinct values: resample the tasks themselves
            totals = np.fromfile(self._task_totals.path, dtype=np.float64).reshape(-1, 2)
            low, high = bootstrap_ci(totals[:, 0], totals[:, 1])
        metrics[f"ci95_low/{REWARD}"] = low
        metrics[f"ci95_high/{REWARD}"] = high
        low_edge, high_edge = reward_stats["min"], reward_stats["max"]
        if high_edge == low_edge:
            high_edge = low_edge + 1.0
        result.reward_histogram = self._values[REWARD].histogram(HISTOGRAM_BINS, low_edge, high_edge)


def _pair_counts(first: np.ndarray, second: np.ndarray) -> dict[tuple[Any, Any], int]:
    """{(first[i], second[i]): how many i} for one block, counted with numpy."""
    pairs, counts = np.unique(np.stack([first.astype(np.float64), second.astype(np.float64)]), axis=1,
                              return_counts=True)
    kinds = (first.dtype.type, second.dtype.type)
    return {(kinds[0](a).item(), kinds[1](b).item()): int(n) for a, b, n in zip(pairs[0], pairs[1], counts)}


def _write_groups(out: Any, columns: dict[str, np.ndarray]) -> None:
    """One JSON line per task from per-task columns; NaN means the task has no value for that statistic."""
    names = list(columns)
    lists = [columns[name].tolist() for name in names]
    for values in zip(*lists):
        out.write(orjson.dumps({name: value for name, value in zip(names, values) if value == value},
                               option=orjson.OPT_APPEND_NEWLINE))


def iter_groups(path: Path) -> Iterator[dict[str, Any]]:
    """The per-task statistics of a finished result, one dict per task in task order."""
    with open(path, "rb") as file:
        for line in file:
            yield orjson.loads(line)


def compact_row(row: dict[str, Any]) -> dict[str, Any]:
    """What an environment's metrics hooks get of a rollout: its keys and short scalar fields, no transcript."""
    compact: dict[str, Any] = {TASK_INDEX: row[TASK_INDEX], ROLLOUT_INDEX: row[ROLLOUT_INDEX]}
    for key, value in row.items():
        if key.startswith(INTERNAL_PREFIX):
            continue
        if type(value) in _NUMBER_TYPES or value is None or (type(value) is str and len(value) <= COMPACT_STRING_CHARS):
            compact[key] = value
    return compact


def _per_task(values: np.ndarray, starts: np.ndarray, group_of_row: np.ndarray) -> dict[str, np.ndarray]:
    """mean/std/min/max/median of `values` within each task (NaN where a task has none), fully vectorised."""
    valid = np.isfinite(values)
    counts = np.add.reduceat(valid.astype(np.int64), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.add.reduceat(np.where(valid, values, 0.0), starts) / counts
        deviation = np.where(valid, values - mean[group_of_row], 0.0)
        # Sample std (n - 1), as NeMo Gym's pandas; one value has std 0.
        std = np.where(counts > 1, np.sqrt(np.add.reduceat(deviation * deviation, starts) / (counts - 1)), 0.0)
    low = np.minimum.reduceat(np.where(valid, values, np.inf), starts)
    high = np.maximum.reduceat(np.where(valid, values, -np.inf), starts)
    # Sort by (task, value) with missing values last in each task; the median sits in the middle of the valid ones.
    ordered = values[np.lexsort((np.where(valid, values, np.inf), group_of_row))]
    lower = ordered[starts + np.maximum(counts - 1, 0) // 2]
    upper = ordered[starts + counts // 2]
    median = (lower + upper) / 2
    missing = counts == 0
    return {stat: np.where(missing, np.nan, array_) for stat, array_ in zip(STATS, (mean, std, low, high, median))}
