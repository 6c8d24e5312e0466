"""The collection engine: stream rollouts to agents under a concurrency limit and commit each result as it lands.

`num_samples_in_parallel` workers pull the next pending row from one shared, lazy iterator, so at most that many
rows exist in memory and the input is read only as fast as rollouts finish. Each rollout has a hard deadline and a
bounded number of attempts; a retryable failure (connection, timeout, 5xx, 429) is retried with jittered exponential
backoff, anything else — or a retryable failure that used up its attempts — becomes one failures-file record.
"""

import asyncio
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Iterator, TypeVar

import orjson
import uvloop

from nemo_gym.http_client import FAILURE_CLASSES, HttpClient, RequestFailed, RetryPolicy
from nemo_gym.rollout_collection.keys import AGENT_REF, KeySet, keyed, row_key
from nemo_gym.rollout_collection.progress import Progress
from nemo_gym.rollout_collection.store import AppendFile

T = TypeVar("T")
_LAST_ERROR_CHARS = 500
_RETRYABLE = ("connect", "timeout", "http_5xx")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop: the collector's event loop is its hot path."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


@dataclass
class RunStats:
    succeeded: int = 0
    failed: int = 0
    exhausted: int = 0  # failed keys skipped because earlier runs used up their attempts
    failures_by_class: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class RunLimits:
    max_attempts: int  # per rollout, in this run
    max_total_attempts: int  # per rollout, over all runs of this output
    rollout_timeout_s: float
    backoff: RetryPolicy


def _failure_class(exc: RequestFailed) -> str:
    """The most specific class: an agent's 502 carries the class of the downstream call that failed."""
    if isinstance(exc.body, dict) and isinstance(exc.body.get("error"), dict):
        downstream = exc.body["error"].get("failure_class")
        if downstream in FAILURE_CLASSES:
            return downstream
    return exc.failure_class


def _retryable(exc: RequestFailed) -> bool:
    if exc.status == 429:
        return True
    # A downstream 4xx relayed as 502 is a bad request, which no retry fixes.
    return exc.failure_class in _RETRYABLE and _failure_class(exc) != "http_4xx"


def _reward(reply: Any, url: str) -> float:
    reward = reply.get("reward") if isinstance(reply, dict) else None
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        got = f"reward={reward!r}" if isinstance(reply, dict) else f"a {type(reply).__name__}"
        raise RequestFailed("invalid_response", f"{url} answered without a finite numeric reward ({got})", url=url)
    return float(reward)


class Runner:
    """Runs the pending rollouts of one collection run; every outcome is written before the next row is taken."""

    def __init__(self, http: HttpClient, agent_urls: dict[str, str], limits: RunLimits, output: AppendFile,
                 failures: AppendFile, done: KeySet, prior_attempts: dict[tuple[int, int], int],
                 progress: Progress) -> None:
        self.http = http
        self.run_urls = {name: f"{url}/run" for name, url in agent_urls.items()}
        self.limits = limits
        self.output = output
        self.failures = failures
        self.done = done
        self.prior_attempts = prior_attempts
        self.progress = progress
        self.stats = RunStats()
        # Called with each committed rollout row (e.g. the W&B upload); it must not block the event loop for long.
        self.row_listeners: list[Callable[[dict[str, Any]], None]] = []

    def pending(self, lines: Iterator[bytes]) -> Iterator[tuple[tuple[int, int], bytes]]:
        """The materialized rows still to run: not done, and with attempts left across runs."""
        for line in lines:
            key = row_key(line)
            if key in self.done:
                continue
            if self.prior_attempts.get(key, 0) >= self.limits.max_total_attempts:
                self.stats.exhausted += 1
                continue
            yield key, line

    async def run(self, lines: Iterator[bytes], concurrency: int) -> RunStats:
        rows = self.pending(lines)
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(concurrency):
                    group.create_task(self._worker(rows))
        except ExceptionGroup as group_error:
            raise group_error.exceptions[0] from None  # a local fault (e.g. disk full): report it plainly
        return self.stats

    async def _worker(self, rows: Iterator[tuple[tuple[int, int], bytes]]) -> None:
        # Safe to share: next() never awaits, so two workers never step the iterator at once.
        for key, line in rows:
            await self._rollout(key, orjson.loads(line))

    async def _rollout(self, key: tuple[int, int], row: dict[str, Any]) -> None:
        url = self.run_urls[row[AGENT_REF]["name"]]
        prior = self.prior_attempts.get(key, 0)
        budget = min(self.limits.max_attempts, self.limits.max_total_attempts - prior)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(self.limits.rollout_timeout_s):
                    reply = await self.http.post_json(url, row)
                reward = _reward(reply, url)
            except TimeoutError:
                error = RequestFailed(
                    "timeout", f"rollout exceeded +rollout_timeout_s={self.limits.rollout_timeout_s:g} at {url}",
                    url=url,
                )
            except RequestFailed as exc:
                error = exc
            else:
                self._succeed(key, row, reply, reward)
                return
            if attempt >= budget or not _retryable(error):
                self._fail(key, row, error, prior + attempt)
                return
            await asyncio.sleep(self.limits.backoff.delay(attempt))

    def _succeed(self, key: tuple[int, int], row: dict[str, Any], reply: dict[str, Any], reward: float) -> None:
        out = keyed(*key, reply)
        out[AGENT_REF] = row[AGENT_REF]
        self.output.write_line(orjson.dumps(out, option=orjson.OPT_APPEND_NEWLINE))
        self.done.add(*key)
        self.stats.succeeded += 1
        self.progress.record_success(reward)
        for listener in self.row_listeners:
            listener(out)

    def _fail(self, key: tuple[int, int], row: dict[str, Any], error: RequestFailed, attempts: int) -> None:
        failure_class = _failure_class(error)
        record = keyed(*key, {
            AGENT_REF: row[AGENT_REF],
            "failure_class": failure_class,
            "attempts": attempts,
            "last_error": error.message[:_LAST_ERROR_CHARS],
            "http_status": error.status,
        })
        self.failures.write_line(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        self.stats.failed += 1
        self.stats.failures_by_class[failure_class] += 1
        self.progress.record_failure()
