"""The collection engine: stream rollouts to agents under a concurrency limit and commit each result as it lands.

Workers pull the next pending row from one shared, lazy iterator once the run's `AdaptiveLimit` lets them (at most
its level in flight, `num_samples_in_parallel` at most), so at most that many rows exist in memory and the input is
read only as fast as rollouts finish; each finished rollout tells the limit its latency and 429s. Each row runs on the run's
`RolloutEngine`, the one the Python API runs on (`run_rollout`: deadline, bounded attempts with backoff, failure
class); a success becomes one output line, a failure one failures-file record.

Before a worker takes a row it asks the run's start checks (the drain margin before a deadline, a cost budget): the
first that gives a reason stops every worker from starting more, and the rollouts in flight finish (`stopped_starting`).
"""

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import orjson

from nemo_gym.failures import FailureClass
from nemo_gym.model_call_replay import ReplayTag, tagged, without_tag
from nemo_gym.model_calls import calls_of
from nemo_gym.rollout_collection.concurrency import AdaptiveLimit, Fixed, Outcome
from nemo_gym.rollout_collection.engine import RolloutEngine
from nemo_gym.rollout_collection.keys import KeySet
from nemo_gym.rollout_collection.progress import Progress
from nemo_gym.rollout_collection.run_counters import RunCounters
from nemo_gym.rollout_collection.rollout import RolloutFailure, RolloutSuccess, result_row
from nemo_gym.rollout_collection.store import AppendFile
from nemo_gym.run_files.rows import keyed, row_key
from nemo_gym.run_format import AGENT_REF, ATTEMPTS, FAILED_ROLLOUT, FAILURE_CLASS, HTTP_STATUS, LAST_ERROR

_LAST_ERROR_CHARS = 500


@dataclass
class RunStats:
    succeeded: int = 0
    failed: int = 0
    exhausted: int = 0  # failed keys skipped because earlier runs used up their attempts
    failures_by_class: Counter[str] = field(default_factory=Counter)
    stopped_starting: str | None = None  # why no more rollouts were started (a start check's reason), if one said so
    stopped_by: str | None = None  # the name of the start check that said so
    replayed_calls: int = 0  # model calls of this run's rollouts answered from the replay journal


# Asked before each rollout starts: a reason to start no more (the run then drains), or None.
StartCheck = Callable[[], str | None]


class Runner:
    """Runs the pending rollouts of one collection run; every outcome is written before the next row is taken."""

    def __init__(self, engine: RolloutEngine, max_total_attempts: int, output: AppendFile, failures: AppendFile,
                 done: KeySet, prior_attempts: dict[tuple[int, int], int], progress: Progress, *,
                 limit: AdaptiveLimit | None = None, counters: RunCounters | None = None) -> None:
        """`limit`: the adaptive concurrency (default: exactly the concurrency `run` is given)."""
        self.engine = engine  # its policy holds the attempts of one run
        self.max_total_attempts = max_total_attempts  # per rollout, over all runs of this output
        self.output = output
        self.failures = failures
        self.done = done
        self.prior_attempts = prior_attempts
        self.progress = progress
        self.limit = limit
        self.counters = counters or RunCounters()
        self.stats = RunStats()
        # Called with each committed rollout row (e.g. the W&B upload); it must not block the event loop for long.
        self.row_listeners: list[Callable[[dict[str, Any]], None]] = []
        # Called with each rollout row before it is written, to add to it (e.g. each model call's cost).
        self.row_preparers: list[Callable[[dict[str, Any]], None]] = []
        self.start_checks: dict[str, StartCheck] = {}  # by name, asked in the order they were added
        # Called with each finished rollout's duration in seconds, its attempts included (e.g. the drain margin).
        self.duration_listeners: list[Callable[[float], None]] = []
        # With replay on, what each rollout's model calls are tagged with, less the key (model_call_replay.py).
        self.replay: ReplayTag | None = None

    def pending(self, lines: Iterator[bytes]) -> Iterator[tuple[tuple[int, int], bytes]]:
        """The materialized rows still to run: not done, and with attempts left across runs."""
        for line in lines:
            key = row_key(line)
            assert key is not None, "the materialized inputs are ours: every line starts with its keys"
            if key in self.done:
                continue
            if self.prior_attempts.get(key, 0) >= self.max_total_attempts:
                self.stats.exhausted += 1
                continue
            yield key, line

    async def run(self, lines: Iterator[bytes], concurrency: int) -> RunStats:
        rows = self.pending(lines)
        limit = self.limit or AdaptiveLimit(concurrency, Fixed(), initial=concurrency)
        self.engine.bind()
        self.engine.enter()
        workers = 0

        def spawn(old: int, level: int, outcome: Outcome | None = None) -> None:
            """A worker per place the level opens: a ceiling far above the level costs no idle tasks."""
            nonlocal workers
            while workers < level:
                group.create_task(self._worker(rows, limit))
                workers += 1

        try:
            async with asyncio.TaskGroup() as group:
                spawn(0, limit.level)
                limit.listeners.append(spawn)
        except ExceptionGroup as group_error:
            raise group_error.exceptions[0] from None  # a local fault (e.g. disk full): report it plainly
        finally:
            if spawn in limit.listeners:
                limit.listeners.remove(spawn)
            await self.engine.leave()
        return self.stats

    async def _worker(self, rows: Iterator[tuple[tuple[int, int], bytes]], limit: AdaptiveLimit) -> None:
        while True:
            admitted = await limit.acquire()
            # Safe to share: next() never awaits, so two workers never step the iterator at once.
            item = None if self._stop_starting() else next(rows, None)
            if item is None:
                limit.release(None)
                return
            outcome: Outcome | None = None
            try:
                outcome = await self._rollout(*item, admitted)
            finally:
                limit.release(outcome)

    async def _rollout(self, key: tuple[int, int], line: bytes, admitted: int) -> Outcome:
        row = orjson.loads(line)
        agent = row[AGENT_REF]["name"]
        prior = self.prior_attempts.get(key, 0)
        started = time.monotonic()
        self.counters.started(agent)
        sent = row
        if self.replay is not None:
            tag = replace(self.replay, key=key)
            sent = {**row, "responses_create_params": tagged(row["responses_create_params"], tag)}
        result = await self.engine.run(agent, sent, self.max_total_attempts - prior)
        latency = time.monotonic() - started
        for listener in self.duration_listeners:
            listener(latency)
        if isinstance(result, RolloutSuccess):
            calls = calls_of(result.reply)
            self.stats.replayed_calls += sum(call.replayed for call in calls)
            self.counters.succeeded(agent, result.attempts, calls)
            self._succeed(key, row, result)
            # 429s its model calls met were waited out by their model server, which paces the endpoint itself
            # (responses_api_models/rate_limits.py): they are no reason to hold fewer rollouts in flight.
            return Outcome(admitted, latency, rate_limited=0, failed=False)
        self.counters.failed(agent, result.attempts)
        self._fail(key, row, result, prior + result.attempts)
        rate_limited = 1 if result.failure_class == FailureClass.RATE_LIMITED else 0
        return Outcome(admitted, latency, rate_limited, failed=True)

    def _stop_starting(self) -> bool:
        """True once a start check gave a reason (kept in `stats.stopped_starting`): no worker takes another row."""
        if self.stats.stopped_starting is None:
            for name, check in self.start_checks.items():
                reason = check()
                if reason is not None:
                    self.stats.stopped_starting, self.stats.stopped_by = reason, name
                    break
        return self.stats.stopped_starting is not None

    def _succeed(self, key: tuple[int, int], row: dict[str, Any], outcome: RolloutSuccess) -> None:
        out = result_row(row, without_tag(outcome.reply) if self.replay else outcome.reply)
        for prepare in self.row_preparers:
            prepare(out)
        self.output.write_line(orjson.dumps(out, option=orjson.OPT_APPEND_NEWLINE))
        self.done.add(*key)
        self.stats.succeeded += 1
        self.progress.record_success(outcome.reward)
        for listener in self.row_listeners:
            listener(out)

    def _fail(self, key: tuple[int, int], row: dict[str, Any], failure: RolloutFailure, attempts: int) -> None:
        record = keyed(*key, {
            AGENT_REF: row[AGENT_REF],
            FAILURE_CLASS: failure.failure_class,
            ATTEMPTS: attempts,
            LAST_ERROR: failure.last_error[:_LAST_ERROR_CHARS],
            HTTP_STATUS: failure.http_status,
            **({FAILED_ROLLOUT: without_tag(failure.reply)} if failure.reply is not None else {}),
        })
        self.failures.write_line(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        self.stats.failed += 1
        self.stats.failures_by_class[str(failure.failure_class)] += 1
        self.progress.record_failure()
