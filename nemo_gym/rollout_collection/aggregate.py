"""Metrics over finished rollouts and merging of shard files: the one aggregation path of the collector.

ng_collect_rollouts (at the end of a run) and ng_aggregate_rollouts (over shards) both call `aggregate_rollouts`,
so live and offline numbers cannot disagree. It reads every key once in key order (`run_files.key_order`),
computes the generic metrics in this process (`nemo_gym.metrics`: per-field statistics, pass@k, majority@k, a
bootstrap interval, failure rates), and then lets each environment add its own: the agent's `/aggregate_metrics`
gets the library's `agent_metrics`; only an environment that overrides a row hook answers `needs_rows` and then
gets the compact rows too (keys and scalar fields, no transcripts), as one request body streamed from a second pass
over the files. The environment's answer is merged over the library's numbers.

ng_aggregate_rollouts merges shards in that same pass (`merge_into`): each kept line is written to the merged file
as the metrics read it, so the shards are indexed, sorted and read once, as one file of the same rows would be.

When no server answers (no head server, or an agent that refuses the connection), that agent's environment metrics
are skipped, not guessed: the library's metrics, the report and the merged file are still written, and the result
names what was skipped and why (`AggregateResult.skipped`), so the caller can say so and exit non-zero.
"""

from collections import Counter, defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Iterator, Sequence

import orjson

from nemo_gym import console
from nemo_gym.compat.head_detect import NEMO_GYM, HeadServerError
from nemo_gym.compat.verify_responses import check_answer, verify_responses_body
from nemo_gym.errors import InputDataError, NemoGymError
from nemo_gym.failures import FailureClass, RequestFailed, RetryPolicy
from nemo_gym.http_client import HttpClient
from nemo_gym.json_chunks import as_async, json_array_chunks
from nemo_gym.metrics.accumulator import AgentAccumulator, AgentMetrics, compact_row, iter_groups
from nemo_gym.metrics.call_metrics import COST_METRIC
from nemo_gym.metrics.report import AgentReport, write_report
from nemo_gym.pricing import format_usd
from nemo_gym.resources_servers.metrics import headline_metrics
from nemo_gym.run_files.failures import FailureRecord, latest_failures, write_failures
from nemo_gym.run_files.key_order import ReadStats, iter_unique_lines
from nemo_gym.run_files.metrics_file import writing_metrics
from nemo_gym.run_files.paths import RunPaths, report_path
from nemo_gym.run_files.rows import replacing_lines, row_key
from nemo_gym.run_format import AGENT_REF, ROLLOUT_INDEX, TASK_INDEX
from nemo_gym.server.client import ServerClient

AGGREGATE_TIMEOUT_S = 1800.0
_RETRY = RetryPolicy(max_attempts=3, backoff_base_s=1.0)


def _agent_of(row: Any, line: bytes) -> str:
    ref = row.get(AGENT_REF) if isinstance(row, dict) else None
    name = ref.get("name") if isinstance(ref, dict) else None
    if not isinstance(name, str):
        raise InputDataError(f"rollout row has no agent_ref.name: {line[:200]!r}")
    return name


def _rows_body(files: Sequence[Path], agent: str, agent_metrics: dict[str, float],
               work_dir: Path) -> AsyncIterator[bytes]:
    """`{"agent_metrics": {...}, "rows": [compact rows of `agent`]}`, produced in chunks by a second pass over the
    files: only environments that ask for rows pay for it, and nothing is held in memory or spooled to disk."""

    def rows() -> Iterator[dict[str, Any]]:
        for line in iter_unique_lines(files, ReadStats(), work_dir):
            row = orjson.loads(line)
            if _agent_of(row, line) == agent:
                yield compact_row(row)

    return as_async(json_array_chunks(b'{"agent_metrics":' + orjson.dumps(agent_metrics) + b',"rows":[', rows()))


async def _environment_metrics(http: HttpClient, url: str, files: Sequence[Path], agent: str,
                               agent_metrics: dict[str, float], work_dir: Path, timeout_s: float) -> dict[str, Any]:
    """The environment's answer to the library's metrics; the compact rows go only to one that asks for them."""
    answer = await http.post_json(url, {"agent_metrics": agent_metrics}, timeout_s=timeout_s, retry=_RETRY)
    if isinstance(answer, dict) and answer.get("needs_rows"):
        answer = await http.post_json_stream(url, lambda: _rows_body(files, agent, agent_metrics, work_dir),
                                             timeout_s=timeout_s, retry=_RETRY)
    if not isinstance(answer, dict):
        raise RequestFailed(FailureClass.INVALID_RESPONSE, f"{url} did not answer with a JSON object", url=url)
    return answer


async def _nemo_gym_metrics(http: HttpClient, url: str, files: Sequence[Path], agent: str, work_dir: Path,
                            timeout_s: float) -> dict[str, Any]:
    """A NeMo Gym agent's answer to its own protocol: every row of `agent` in one streamed `verify_responses` body."""
    def body() -> AsyncIterator[bytes]:  # a fresh stream for each attempt
        return verify_responses_body(lambda: iter_unique_lines(files, ReadStats(), work_dir),
                                     lambda row: (row.get(AGENT_REF) or {}).get("name") == agent)

    return check_answer(await http.post_json_stream(url, body, timeout_s=timeout_s, retry=_RETRY), url)


def _merged_groups(library: AgentMetrics, answer_groups: Any) -> Iterator[dict[str, Any]]:
    """The library's per-task statistics with the environment's per-task entries merged in by task index."""
    extra: dict[Any, dict[str, Any]] = {}
    for entry in answer_groups if isinstance(answer_groups, list) else []:
        if isinstance(entry, dict):
            extra.setdefault(entry.get(TASK_INDEX), {}).update(entry)
    for group in iter_groups(library.groups_path):
        group.update(extra.pop(group[TASK_INDEX], {}))
        yield group
    yield from extra.values()


@dataclass
class MergeStats:
    rows: int = 0
    duplicates: int = 0
    failures: int = 0  # failures still outstanding after the merge (their keys succeeded in no shard)


@dataclass
class AggregateResult:
    path: Path
    summaries: list[dict[str, Any]]  # per agent: agent_ref, agent_metrics, key_metrics (no per-task metrics)
    report_path: Path
    rows: int
    duplicates: int
    merged: MergeStats | None = None  # with `merge_into`: what the merge wrote
    skipped: dict[str, str] = field(default_factory=dict)  # agent -> why its environment's metrics are missing

    def skipped_message(self) -> str | None:
        """One line saying which environments' own metrics are missing and why, or None when none is."""
        if not self.skipped:
            return None
        reasons = "; ".join(f"{agent}: {why}" for agent, why in sorted(self.skipped.items()))
        return (f"the environments' own metrics were skipped because no server answered ({reasons}); the library "
                f"metrics, the report{' and the merged rollouts' if self.merged else ''} were written without them. "
                f"Start the run's servers (ng_run with its configs) and run ng_aggregate_rollouts again to add them")


def headline_lines(summaries: list[dict[str, Any]]) -> list[str]:
    """One line per agent with its key metrics, as the collector and ng_aggregate_rollouts print them, then the
    rollouts' cost where any was priced."""
    lines = []
    costs = []
    for entry in summaries:
        shown = entry.get("key_metrics") or entry.get("agent_metrics") or {}
        metrics = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
        lines.append(f"  {entry[AGENT_REF]['name']}: {metrics or '(no key metrics)'}")
        if COST_METRIC in entry["agent_metrics"]:
            costs.append(entry["agent_metrics"][COST_METRIC])
    if costs:
        lines.append(f"  cost of the rollouts: {format_usd(sum(costs))} ({COST_METRIC} over the agents)")
    return lines


class _NoServer(Exception):
    """No server answered where an environment's metrics come from; the message says which."""


async def _agent_urls(servers: ServerClient, agents: list[str]) -> dict[str, str | _NoServer]:
    """Each agent's URL, or why none can be had because nothing answers (other failures raise)."""
    try:
        return {agent: await servers.url(agent) for agent in agents}
    except HeadServerError as exc:
        return {agent: _NoServer(str(exc)) for agent in agents}


def _failures_of(files: Sequence[Path]) -> dict[tuple[int, int], FailureRecord]:
    return latest_failures(RunPaths(path).failures for path in files)


def _read_rows(lines: Iterable[bytes], failures: dict[tuple[int, int], FailureRecord],
               accumulators: dict[str, AgentAccumulator], work_dir: Path) -> None:
    """One pass over the rows into one accumulator per agent; failures that later succeeded are forgotten."""
    failed_by_task: dict[str, Counter] = defaultdict(Counter)  # per agent; a task's count is final after its rows
    for record in failures.values():
        failed_by_task[record.agent][record.task] += 1
    for line in lines:
        row = orjson.loads(line)
        agent = _agent_of(row, line)
        accumulator = accumulators.get(agent)
        if accumulator is None:
            accumulator = accumulators[agent] = AgentAccumulator(work_dir, failed_by_task[agent])
        accumulator.add(row)
        failure = failures.pop((row[TASK_INDEX], row[ROLLOUT_INDEX]), None)
        if failure is not None:
            failed_by_task[failure.agent][row[TASK_INDEX]] -= 1


def _copied(lines: Iterable[bytes], write: Callable[[bytes], object]) -> Iterator[bytes]:
    for line in lines:
        write(line)
        yield line


def _warn_duplicates(stats: ReadStats) -> None:
    if stats.duplicates:
        console.warn(f"dropped {stats.duplicates} duplicate rollouts (identical copies of one key) found in "
                     f"{', '.join(sorted(stats.duplicate_files))}")


def _merged(dest: Path, stats: ReadStats, failures: dict[tuple[int, int], FailureRecord]) -> MergeStats:
    """Finish a merge whose rows are in `dest`: the failures still outstanding go to its sidecar."""
    write_failures(RunPaths(dest).failures, failures)
    _warn_duplicates(stats)
    return MergeStats(stats.rows, stats.duplicates, len(failures))


def _first_pass(files: Sequence[Path], stats: ReadStats, failures: dict[tuple[int, int], FailureRecord],
                accumulators: dict[str, AgentAccumulator], work_dir: Path, merge_into: Path | None
                ) -> MergeStats | None:
    """`_read_rows` over the rows of `files`; with `merge_into`, each kept line is written there on the way."""
    # Closed here, not when collected, so that a pass stopped by bad input removes its key index at once.
    with closing(iter_unique_lines(files, stats, work_dir)) as lines:
        if merge_into is None:
            _read_rows(lines, failures, accumulators, work_dir)
            return None
        with replacing_lines(merge_into) as write:
            _read_rows(_copied(lines, write), failures, accumulators, work_dir)
    return _merged(merge_into, stats, failures)


async def aggregate_rollouts(files: Sequence[Path], metrics_path: Path, servers: ServerClient,
                             http_timeout_s: float = AGGREGATE_TIMEOUT_S,
                             merge_into: Path | None = None) -> AggregateResult:
    """Metrics over the rollouts of `files` (and their failures sidecars) into `metrics_path` and its report.

    With `merge_into`, the same pass writes what `merge_shards(files, merge_into)` writes, and the metrics and report
    are those of that merged file, byte for byte as when it was merged first and then aggregated."""
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    stats = ReadStats()
    failures = _failures_of(files)
    accumulators: dict[str, AgentAccumulator] = {}
    try:
        merged = _first_pass(files, stats, failures, accumulators, metrics_path.parent, merge_into)
        if merge_into is not None:
            # From here on, the merged file's view: its one file, no duplicates in it, its sidecar's key order.
            files, stats, failures = [merge_into], ReadStats(rows=stats.rows), dict(sorted(failures.items()))
        if not accumulators:
            raise NemoGymError(f"no rollouts to aggregate in {', '.join(map(str, files))}")
        _warn_duplicates(stats)
        failed_by_agent: dict[str, Counter] = defaultdict(Counter)
        for record in failures.values():
            failed_by_agent[record.agent][record.failure_class] += 1
        agents = sorted(accumulators)
        urls = await _agent_urls(servers, agents)
        summaries, reports, skipped = [], [], {}
        with writing_metrics(metrics_path) as metrics:
            for agent in agents:
                accumulator = accumulators[agent]
                console.progress(f"aggregating {accumulator.rows} rollouts of '{agent}' ...")
                library = accumulator.finish(dict(failed_by_agent.get(agent, {})))
                try:
                    answer = await _answer(servers, urls[agent], files, agent, library, metrics_path.parent,
                                           http_timeout_s)
                except _NoServer as exc:
                    skipped[agent] = str(exc)
                    answer = {}
                agent_metrics = {**library.agent_metrics, **(answer.get("agent_metrics") or {})}
                key_metrics = answer.get("key_metrics") or headline_metrics(agent_metrics)
                metrics.add(agent, agent_metrics, key_metrics,
                            _merged_groups(library, answer.get("group_level_metrics")))
                summaries.append({AGENT_REF: {"name": agent}, "agent_metrics": agent_metrics,
                                  "key_metrics": key_metrics})
                reports.append(AgentReport(agent, key_metrics, agent_metrics, library.pass_at_k,
                                           library.reward_histogram, dict(failed_by_agent.get(agent, {})),
                                           library.model_calls))
                accumulator.close()
    finally:
        for accumulator in accumulators.values():
            accumulator.close()
    notes = [f"{len(files)} rollout file(s): " + ", ".join(map(str, files))]
    if stats.duplicates:
        notes.append(f"{stats.duplicates} duplicate rollouts (identical copies) dropped")
    notes += [f"environment metrics of {agent} skipped: no server answered ({why})" for agent, why in skipped.items()]
    report = write_report(report_path(metrics_path), reports, metrics_path.name, notes,
                          [str(Path(f).resolve()) for f in files])
    return AggregateResult(metrics_path, summaries, report, stats.rows, stats.duplicates, merged, skipped)


async def _answer(servers: ServerClient, url: str | _NoServer, files: Sequence[Path], agent: str,
                  library: AgentMetrics, work_dir: Path, timeout_s: float) -> dict[str, Any]:
    """The environment's answer for `agent`; `_NoServer` when nothing answers there."""
    if isinstance(url, _NoServer):
        raise url
    endpoint = f"{url}/aggregate_metrics"
    try:
        if servers.head_kind == NEMO_GYM:
            return await _nemo_gym_metrics(servers.http, endpoint, files, agent, work_dir, timeout_s)
        return await _environment_metrics(servers.http, endpoint, files, agent, library.agent_metrics, work_dir,
                                          timeout_s)
    except RequestFailed as exc:
        if exc.failure_class == FailureClass.CONNECT:
            raise _NoServer(f"nothing answers at {endpoint}") from None
        raise


def merge_shards(files: Sequence[Path], dest: Path) -> MergeStats:
    """Write every rollout of `files` to `dest` once, ordered by key, and their outstanding failures to its sidecar.

    Identical copies of a key are dropped (and counted); differing ones are an error naming both files.
    """
    read = ReadStats()
    failures = _failures_of(files)
    with replacing_lines(dest) as write:
        for line in iter_unique_lines(files, read, dest.parent):
            write(line)
            if (key := row_key(line)) is not None:
                failures.pop(key, None)
    return _merged(dest, read, failures)
