"""The collection engine: stream rollouts to agents under a concurrency limit and commit each result as it lands.

Workers pull the next pending row from one shared, lazy iterator once the run's `AdaptiveLimit` lets them (at most
its level in flight, `num_samples_in_parallel` at most), so at most that many rows exist in memory and the input is
read only as fast as rollouts finish; each finished rollout tells the limit its latency and 429s. Each row runs on the run's
`RolloutEngine`, the one the Python API runs on (`run_rollout`: deadline, bounded attempts with backoff, failure
class); a success becomes one output line, a failure one failures-file record.
"""

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import orjson

from nemo_gym.failures import FailureClass
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
            item = next(rows, None)
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
        result = await self.engine.run(agent, row, self.max_total_attempts - prior)
        latency = time.monotonic() - started
        if isinstance(result, RolloutSuccess):
            calls = calls_of(result.reply)
            self.counters.succeeded(agent, result.attempts, calls)
            self._succeed(key, row, result)
            # 429s its model calls met were waited out by their model server, which paces the endpoint itself
            # (responses_api_models/rate_limits.py): they are no reason to hold fewer rollouts in flight.
            return Outcome(admitted, latency, rate_limited=0, failed=False)
        self.counters.failed(agent, result.attempts)
        self._fail(key, row, result, prior + result.attempts)
        rate_limited = 1 if result.failure_class == FailureClass.RATE_LIMITED else 0
        return Outcome(admitted, latency, rate_limited, failed=True)

    def _succeed(self, key: tuple[int, int], row: dict[str, Any], outcome: RolloutSuccess) -> None:
        out = result_row(row, outcome.reply)
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
            **({FAILED_ROLLOUT: failure.reply} if failure.reply is not None else {}),
        })
        self.failures.write_line(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        self.stats.failed += 1
        self.stats.failures_by_class[str(failure.failure_class)] += 1
        self.progress.record_failure()
