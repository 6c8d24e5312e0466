"""The second phase of opening a run: the overview's metrics (the metrics library's accumulators per agent, pass@k,
the reward histogram), over every rollout again in key order, into the index folder's `overview.json`.

The first phase (`index.build_index`: key order, the column store) is all the rollout table needs, so the server
answers as soon as it ends and this phase runs in a background thread; the overview page says how far it got. The
rows are read back by offset from the columns, in the order the first phase fed them, so the metrics are the same
numbers one pass would give. A viewer stopped before this phase ends leaves no `overview.json`, and the next open
of the same files computes it again.
"""

import os
import threading
from pathlib import Path
from typing import Any, Callable

import orjson

from nemo_gym.metrics.accumulator import AgentAccumulator
from nemo_gym.metrics.call_metrics import COST_METRIC
from nemo_gym.resources_servers.metrics import headline_metrics
from nemo_gym.run_files.manifest import ManifestError, read_manifest
from nemo_gym.run_files.metrics_file import metrics_heads
from nemo_gym.run_files.paths import RunPaths
from nemo_gym.viewer.columns import ColumnStore
from nemo_gym.viewer.errors import ViewerError
from nemo_gym.viewer.row_fields import parse_row

OVERVIEW = "overview.json"
_COLUMNS = ("file", "offset", "length", "agent", "failure")


def _manifest(rollouts: Path) -> dict[str, Any] | None:
    """The run's manifest, or None when there is none or it is unreadable (the viewer shows what it can)."""
    try:
        return read_manifest(RunPaths(rollouts).manifest)
    except (OSError, ManifestError):
        return None


def _agent_entries(accumulators: dict[str, AgentAccumulator], agents: list[str],
                   failures_by_agent: dict[str, dict[str, int]], rollout_files: list[Path]) -> list[dict[str, Any]]:
    """Per agent: the library's metrics over its rows (merged with the environment's from the run's aggregate
    metrics file when the run is one file), pass@k, the reward histogram, failures by class."""
    env = metrics_heads(RunPaths(rollout_files[0]).aggregate_metrics) if len(rollout_files) == 1 else {}
    entries = []
    for agent in sorted(agents):
        failures = dict(failures_by_agent.get(agent, {}))
        entry: dict[str, Any] = {"agent": agent, "failures_by_class": failures, "pass_at_k": {},
                                 "histogram": [[], []], "agent_metrics": {}, "key_metrics": {},
                                 "environment_metrics": agent in env, "model_calls": []}
        accumulator = accumulators.get(agent)
        if accumulator is not None:
            result = accumulator.finish(failures)
            entry["agent_metrics"] = {**result.agent_metrics, **env.get(agent, {}).get("agent_metrics", {})}
            entry["key_metrics"] = env.get(agent, {}).get("key_metrics") or headline_metrics(entry["agent_metrics"])
            entry["pass_at_k"] = {str(k): v for k, v in result.pass_at_k.items()}
            edges, counts = result.reward_histogram
            entry["histogram"] = [list(map(float, edges)), list(map(int, counts))]
            entry["model_calls"] = result.model_calls  # per endpoint, from the rows' per-call records
        entries.append(entry)
    return entries


def _total_cost(agents: list[dict[str, Any]]) -> float | None:
    """The run's cost in USD: its agents' `model_calls/cost_usd` added up; None when no rollout was priced."""
    costs = [entry["agent_metrics"][COST_METRIC] for entry in agents if COST_METRIC in entry["agent_metrics"]]
    return sum(costs) if costs else None


def build_overview(directory: Path, rows: ColumnStore, meta: dict[str, Any],
                   progress: Callable[[int], None] = lambda rows_done: None) -> None:
    """Compute the overview of the index in `directory` (its `rows` columns, its `meta`) into `overview.json`."""
    files = [Path(p) for p in meta["files"]]
    rollout_files = files[:meta["rollout_files"]]
    agents: list[str] = meta["agents"]
    accumulators: dict[str, AgentAccumulator] = {}
    fds: dict[int, int] = {}
    try:
        for start, block in rows.chunks(_COLUMNS):
            for file_no, offset, length, agent_id, failure in zip(*(block[name].tolist() for name in _COLUMNS)):
                if failure:
                    continue
                fd = fds.get(file_no)
                if fd is None:
                    fd = fds[file_no] = os.open(files[file_no], os.O_RDONLY)
                agent = agents[agent_id]
                accumulator = accumulators.get(agent)
                if accumulator is None:
                    accumulator = accumulators[agent] = AgentAccumulator()
                accumulator.add(parse_row(os.pread(fd, length, offset)))
            progress(start + len(block["file"]))
        entries = _agent_entries(accumulators, agents, meta["failures_by_agent"], rollout_files)
        overview = {"agents": entries, "cost_usd": _total_cost(entries),
                    "manifests": [{"file": str(p), "manifest": m} for p in rollout_files if (m := _manifest(p))]}
    finally:
        for fd in fds.values():
            os.close(fd)
        for accumulator in accumulators.values():
            accumulator.close()
    tmp = directory / f"{OVERVIEW}.tmp{os.getpid()}"
    tmp.write_bytes(orjson.dumps(overview, option=orjson.OPT_NON_STR_KEYS))
    os.replace(tmp, directory / OVERVIEW)


class OverviewJob:
    """The overview of one opened run: read from its file when an earlier open computed it, else computed by
    `build_overview` in a background thread, started at once."""

    def __init__(self, directory: Path, rows: ColumnStore, meta: dict[str, Any]) -> None:
        self.path = directory / OVERVIEW
        self.total_rows = meta["rows"]
        self.rows_done = 0
        self._error: BaseException | None = None
        self._ready = threading.Event()
        if self.path.is_file():
            self.rows_done = self.total_rows
            self._ready.set()
        else:
            threading.Thread(target=self._run, args=(directory, rows, meta), name="ng_view-overview",
                             daemon=True).start()

    def _run(self, directory: Path, rows: ColumnStore, meta: dict[str, Any]) -> None:
        try:
            build_overview(directory, rows, meta, self._progress)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the overview
            self._error = exc
        finally:
            self._ready.set()

    def _progress(self, rows_done: int) -> None:
        self.rows_done = rows_done

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def result(self) -> dict[str, Any]:
        """The overview, once computed (waits for the background thread)."""
        self._ready.wait()
        if self._error is not None:
            raise ViewerError(f"computing the overview failed: {type(self._error).__name__}: {self._error}")
        return orjson.loads(self.path.read_bytes())
