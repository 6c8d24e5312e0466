"""The index of one run: every rollout (and outstanding failure) in key order, with the columns the viewer filters
and sorts on, built once and reused. The overview's metrics are a second phase (`overview_build`), run in the
background once this one ends.

The build is one streaming pass over the rows in key order, from the aggregation's own key index
(`run_files.key_order.iter_unique_entries`: 40 bytes per row, sorted in memory or in runs on disk, each row read back
by offset). Per row it keeps its location (file, byte offset, length) and a few numbers (reward, tokens, tool calls,
agent, failure class) in a column store on disk, and per task its row span and mean reward. Nothing is kept per row
in memory, so a million-row file builds with the memory of a thousand-row one. Rows are read back later by `pread`
of exactly their bytes.

The index lives in a cache folder named after the files' paths, sizes and modification times: opening the same
files again reuses it, and a file that changed gets a fresh index.
"""

import hashlib
import math
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import orjson

from nemo_gym.errors import InputDataError
from nemo_gym.run_files.failures import FailureRecord, latest_failures
from nemo_gym.run_files.key_order import ReadStats, iter_unique_entries
from nemo_gym.run_files.paths import RunPaths
from nemo_gym.run_files.paths import rollout_files as matching_rollout_files
from nemo_gym.run_files.rows import line_number_at
from nemo_gym.viewer.columns import ROW_COLUMNS, TASK_COLUMNS, ColumnStore, ColumnWriter
from nemo_gym.viewer.errors import NotFound, ViewerError
from nemo_gym.viewer.overview_build import OverviewJob
from nemo_gym.viewer.row_fields import agent_of, cost_of, numbers, parse_row

INDEX_VERSION = 3  # 2: the overview is computed after the index, and meta.json holds failures by agent; 3: cost
META = "meta.json"
PROGRESS_EVERY_S = 5.0


def default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nemo_gym" / "viewer"


def rollout_files(input_glob: str) -> list[Path]:
    """The rollout files a glob (or comma-separated globs) names, without the run's sidecar files."""
    files = [path.resolve() for path in matching_rollout_files(input_glob)]
    if not files:
        raise ViewerError(f"no rollout files match {input_glob!r}")
    return files


def _digest(files: list[Path]) -> str:
    """Names the index of exactly these files as they are now (path, size, mtime of them and their failures)."""
    parts = [f"v{INDEX_VERSION}"]
    for path in files:
        for item in (path, RunPaths(path).failures):
            stat = item.stat() if item.is_file() else None
            parts.append(f"{item}\0{stat.st_size if stat else -1}\0{stat.st_mtime_ns if stat else -1}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


class _Builder:
    """The single pass: rows and failures in key order into the column stores and the tasks table."""

    def __init__(self, files: list[Path], directory: Path) -> None:
        self.files = files
        self.directory = directory
        self.rows = ColumnWriter(directory, "row_", ROW_COLUMNS)
        self.tasks = ColumnWriter(directory, "task_", TASK_COLUMNS)
        self.agents: dict[str, int] = {}
        self.classes: dict[str, int] = {"": 0}
        self.failed_by_agent: dict[str, Counter] = {}
        self.extra_files: list[Path] = []
        self._task: int | None = None
        self._task_first = self._task_count = self._task_scored = self._task_failed = 0
        self._task_sum = 0.0

    def _agent_id(self, name: str) -> int:
        return self.agents.setdefault(name, len(self.agents))

    def _task_row(self, task: int, reward: float, failed: bool) -> None:
        if task != self._task:
            self._end_task()
            self._task, self._task_first = task, self.rows.rows
            self._task_count = self._task_scored = self._task_failed = 0
            self._task_sum = 0.0
        self._task_count += 1
        self._task_failed += failed
        if not math.isnan(reward):
            self._task_scored += 1
            self._task_sum += reward

    def _end_task(self) -> None:
        if self._task is not None:
            mean = self._task_sum / self._task_scored if self._task_scored else math.nan
            self.tasks.append((self._task, self._task_first, self._task_count, mean, self._task_failed))

    def add_row(self, task: int, rollout: int, file_no: int, offset: int, length: int, line: bytes) -> None:
        try:
            row = parse_row(line)
        except orjson.JSONDecodeError as exc:
            path = self.files[file_no]
            raise InputDataError(f"{path}:{line_number_at(path, offset)}: not valid JSON ({exc})") from None
        agent = agent_of(row)
        if agent is None:
            path = self.files[file_no]
            raise InputDataError(f"{path}:{line_number_at(path, offset)}: rollout row has no agent_ref.name")
        reward, input_tokens, output_tokens, tool_calls = numbers(row)
        self._task_row(task, reward, False)
        self.rows.append((task, rollout, file_no, offset, length, reward, input_tokens, output_tokens,
                          self._agent_id(agent), 0, tool_calls, cost_of(row)))

    def add_failure(self, record: FailureRecord) -> None:
        if record.file not in self.extra_files:
            self.extra_files.append(record.file)
        file_no = len(self.files) + self.extra_files.index(record.file)
        failure = self.classes.setdefault(record.failure_class, len(self.classes))
        self.failed_by_agent.setdefault(record.agent, Counter())[record.failure_class] += 1
        self._task_row(record.task, math.nan, True)
        self.rows.append((record.task, record.rollout, file_no, record.offset, record.length, math.nan, -1, -1,
                          self._agent_id(record.agent), failure, 0, math.nan))

    def finish(self) -> None:
        self._end_task()
        self.rows.close()
        self.tasks.close()


def build_index(files: list[Path], directory: Path, say: Callable[[str], None] = lambda message: None) -> None:
    """Build the index of `files` into `directory` (atomically: a half-built index is never picked up); `say` gets
    a progress line every few seconds."""
    started = time.monotonic()
    total_bytes = sum(path.stat().st_size for path in files) or 1
    done_bytes, next_report = 0, started + PROGRESS_EVERY_S
    tmp = directory.with_name(f"{directory.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        builder = _Builder(files, tmp)
        failures = latest_failures(RunPaths(path).failures for path in files)
        pending = sorted(failures)
        next_failure = 0
        stats = ReadStats()
        for entry in iter_unique_entries(files, stats, tmp):
            key = (entry.task, entry.rollout)
            while next_failure < len(pending) and pending[next_failure] < key:
                builder.add_failure(failures[pending[next_failure]])
                next_failure += 1
            if next_failure < len(pending) and pending[next_failure] == key:
                next_failure += 1  # failed earlier, succeeded later: not a failure any more
            builder.add_row(entry.task, entry.rollout, entry.file_no, entry.offset, entry.length, entry.line)
            done_bytes += entry.length
            if builder.rows.rows % 4096 == 0 and time.monotonic() >= next_report:
                say(f"indexed {builder.rows.rows:,} rows ({100 * done_bytes / total_bytes:.0f}% of the bytes)")
                next_report = time.monotonic() + PROGRESS_EVERY_S
        for key in pending[next_failure:]:
            builder.add_failure(failures[key])
        builder.finish()
        meta = {
            "version": INDEX_VERSION, "files": [str(p) for p in files + builder.extra_files],
            "rollout_files": len(files), "rows": builder.rows.rows, "tasks": builder.tasks.rows,
            "failures": sum(sum(c.values()) for c in builder.failed_by_agent.values()),
            "duplicates": stats.duplicates, "agents": sorted(builder.agents, key=builder.agents.__getitem__),
            "failure_classes": sorted(builder.classes, key=builder.classes.__getitem__),
            "failures_by_agent": {agent: dict(counts) for agent, counts in builder.failed_by_agent.items()},
            "build_seconds": round(time.monotonic() - started, 3),
        }
        (tmp / META).write_bytes(orjson.dumps(meta))  # written last: its presence marks a complete index
        if directory.exists():
            shutil.rmtree(tmp)  # another viewer built the same index meanwhile
        else:
            os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class RunIndex:
    """An opened run: `rows` and `tasks` column stores plus what the build recorded."""

    label: str  # "a", or "b" for the run compared against
    input_glob: str
    directory: Path
    meta: dict[str, Any]
    rows: ColumnStore
    tasks: ColumnStore
    files: list[Path]
    built: bool  # whether this open built the index (False: reused)
    overview_job: OverviewJob  # the overview's metrics: ready, or being computed in the background

    @property
    def agents(self) -> list[str]:
        return self.meta["agents"]

    @property
    def failure_classes(self) -> list[str]:
        return self.meta["failure_classes"]

    @property
    def rollout_files(self) -> list[Path]:
        return self.files[:self.meta["rollout_files"]]

    def overview(self) -> dict[str, Any]:
        """Per agent metrics and the manifests; waits while the background phase computes them."""
        return self.overview_job.result()

    def line(self, position: int) -> bytes:
        """The raw JSONL line of the row at `position` (key order), read by offset."""
        if not 0 <= position < self.rows.rows:
            raise NotFound(f"run {self.label} has no row {position}")
        with LineReader(self) as reader:
            return reader.read(int(self.rows.value("file", position)), int(self.rows.value("offset", position)),
                               int(self.rows.value("length", position)))

    def row(self, position: int) -> dict[str, Any]:
        row: dict[str, Any] = parse_row(self.line(position))
        return row

    def is_failure(self, position: int) -> bool:
        return int(self.rows.value("failure", position)) != 0

    def task_span(self, task: int) -> tuple[int, int]:
        """(first row, row count) of `task`."""
        tasks = self.tasks.mapped("task")
        i = int(np.searchsorted(tasks, task))
        if i >= len(tasks) or int(tasks[i]) != task:
            raise NotFound(f"run {self.label} has no task {task}")
        return int(self.tasks.value("first", i)), int(self.tasks.value("count", i))

    def find(self, task: int, rollout: int) -> int:
        first, count = self.task_span(task)
        rollouts = self.rows.read("rollout", first, count)
        hits = np.flatnonzero(rollouts == rollout)
        if not len(hits):
            raise NotFound(f"run {self.label} has no rollout {rollout} of task {task}")
        return first + int(hits[0])


class LineReader:
    """Reads rows by (file, offset, length) with each file opened once, for scans that read many rows."""

    def __init__(self, index: RunIndex) -> None:
        self._files = index.files
        self._fds: dict[int, int] = {}

    def read(self, file_no: int, offset: int, length: int) -> bytes:
        fd = self._fds.get(file_no)
        if fd is None:
            fd = self._fds[file_no] = os.open(self._files[file_no], os.O_RDONLY)
        return os.pread(fd, length, offset)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "LineReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_run(input_glob: str, label: str, cache_root: Path,
             say: Callable[[str], None] = lambda message: None) -> RunIndex:
    """Open the index of the files `input_glob` names, building it first when these files have none yet."""
    files = rollout_files(input_glob)
    directory = cache_root / _digest(files)
    built = False
    if not (directory / META).is_file():
        say(f"indexing {len(files)} file(s) of run {label} ({sum(p.stat().st_size for p in files) / 1e6:.1f} MB) "
            f"into {directory} ...")
        build_index(files, directory, say)
        built = True
    meta = orjson.loads((directory / META).read_bytes())
    rows = ColumnStore(directory, "row_", ROW_COLUMNS, meta["rows"])
    index = RunIndex(label, input_glob, directory, meta, rows, ColumnStore(directory, "task_", TASK_COLUMNS,
                     meta["tasks"]), [Path(p) for p in meta["files"]], built, OverviewJob(directory, rows, meta))
    say(f"run {label}: {meta['rows']} rows ({meta['failures']} failed) over {meta['tasks']} tasks"
        + (f" (index built in {meta['build_seconds']:.1f} s)" if built else " (index reused)"))
    return index
