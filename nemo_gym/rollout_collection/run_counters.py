"""The live counts of one collection run beyond done and failed: per agent, in flight, 429s and retries, the
concurrency level; and the progress file's snapshot of them, written every few seconds while the run goes.

The runner counts (`started`, `succeeded`, `failed`); `ProgressFileTicker` turns the counts, the display's
`Progress`, the adaptive limit and the retry budget into the snapshot that `progress_file.write_progress` writes.
"""

import asyncio
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from nemo_gym import console
from nemo_gym.model_calls import ModelCall
from nemo_gym.rollout_collection.concurrency import AdaptiveLimit
from nemo_gym.rollout_collection.progress import Progress
from nemo_gym.rollout_collection.progress_file import (
    FINISHED,
    INTERVAL_S,
    PAUSED,
    RUNNING,
    remove_stale_temporaries,
    write_progress,
)
from nemo_gym.rollout_collection.retry_budget import RetryBudget

_RATE_WINDOW_S = 60.0  # the rate (and so the ETA) is that of the last minute


@dataclass
class AgentCounts:
    succeeded: int = 0
    failed: int = 0
    in_flight: int = 0
    rate_limited: int = 0  # 429s met by this agent's model calls
    model_calls: int = 0


@dataclass
class RunCounters:
    """Counted by the runner as rollouts start and finish."""

    agents: dict[str, AgentCounts] = field(default_factory=dict)
    rate_limited: int = 0  # 429s the endpoints answered (waited out and sent again by the model servers)
    model_call_retries: int = 0  # model calls sent more than once
    rollout_retries: int = 0  # rollout attempts after the first
    # The 429s the model servers counted as they came (model_server_stats.py); None where none counts them.
    live_rate_limited: Callable[[], int | None] = lambda: None
    # Per model server that routes over replicas, each replica's state as last read (model_server_stats.py).
    live_replicas: Callable[[], dict[str, list[dict[str, Any]]]] = dict
    # The run's vLLM replicas together, as last read from their /metrics (engine_level.FleetLoad); None: not read.
    live_engine: Callable[[], dict[str, Any] | None] = lambda: None
    # What the output's rollouts cost so far, and the budget (spend.Spend.snapshot); None: not counted.
    live_cost: Callable[[], dict[str, Any] | None] = lambda: None

    @property
    def rate_limited_so_far(self) -> int:
        """The run's 429s: the model servers' count, or the rows' where they are ahead of its last read."""
        return max(self.rate_limited, self.live_rate_limited() or 0)

    @property
    def in_flight(self) -> int:
        """Rollouts started and not yet finished, over every agent."""
        return sum(counts.in_flight for counts in self.agents.values())

    def _agent(self, agent: str) -> AgentCounts:
        counts = self.agents.get(agent)
        if counts is None:
            counts = self.agents[agent] = AgentCounts()
        return counts

    def started(self, agent: str) -> None:
        self._agent(agent).in_flight += 1

    def succeeded(self, agent: str, attempts: int, calls: list[ModelCall]) -> None:
        counts = self._agent(agent)
        counts.in_flight -= 1
        counts.succeeded += 1
        counts.model_calls += len(calls)
        limited = sum(call.rate_limited for call in calls)
        counts.rate_limited += limited
        self.rate_limited += limited
        self.model_call_retries += sum(call.attempts - 1 for call in calls)
        self.rollout_retries += attempts - 1

    def failed(self, agent: str, attempts: int) -> None:
        counts = self._agent(agent)
        counts.in_flight -= 1
        counts.failed += 1
        self.rollout_retries += attempts - 1


class ProgressFileTicker:
    """Writes the progress file every `progress_file.INTERVAL_S` seconds while the run goes, and once at the end.

    The file only shows the run: a write that fails (a full disk) is said once, as a warning, and the ticker goes on
    trying at each tick; the run, and its verdict, are not affected."""

    def __init__(self, path: Path, output: Path, progress: Progress, counters: RunCounters, limit: AdaptiveLimit,
                 budget: RetryBudget) -> None:
        self.path = path
        self.output = output
        self.progress = progress
        self.counters = counters
        self.limit = limit
        self.budget = budget
        self.started_at = time.time()
        self._finished: deque[tuple[float, int]] = deque()  # (time, finished so far), over the last minute
        self._task: asyncio.Task[None] | None = None
        self._write_failed = False  # a failed write was reported: later ones are not

    def _rate(self, now: float, finished: int) -> float:
        self._finished.append((now, finished))
        while len(self._finished) > 1 and now - self._finished[0][0] > _RATE_WINDOW_S:
            self._finished.popleft()
        first_time, first_count = self._finished[0]
        if now - first_time < INTERVAL_S:  # the first ticks: the whole run so far
            return self.progress.rate
        return (finished - first_count) / (now - first_time)

    def snapshot(self, state: str, message: str = "") -> dict[str, Any]:
        progress, counters = self.progress, self.counters
        finished = progress.succeeded + progress.failed
        done = progress.initial + progress.succeeded
        rate = self._rate(time.monotonic(), finished)
        remaining = progress.total - done - progress.failed
        mean = progress.mean_reward
        return {
            "state": state,
            "message": message,
            "output": str(self.output.resolve()),
            "started_at": round(self.started_at, 3),
            "updated_at": round(time.time(), 3),
            "elapsed_s": round(time.time() - self.started_at, 1),
            "total": progress.total,
            "done": done,
            "done_before": progress.initial,
            "succeeded": progress.succeeded,
            "failed": progress.failed,
            "in_flight": self.limit.in_flight,
            "rate_per_s": round(rate, 3),
            "eta_s": round(remaining / rate, 1) if rate > 0 and remaining > 0 else None,
            "mean_reward": None if mean is None else round(mean, 6),
            "concurrency": {"level": self.limit.level, "ceiling": self.limit.ceiling,
                            "reason": self.limit.policy.reason},
            "rate_limited": counters.rate_limited_so_far,
            "retries": {"rollouts": counters.rollout_retries, "model_calls": counters.model_call_retries,
                        "refused": self.budget.refused_retries},
            "agents": {name: asdict(counts) for name, counts in sorted(counters.agents.items())},
            **({"replicas": replicas} if (replicas := counters.live_replicas()) else {}),
            **({"engine": engine} if (engine := counters.live_engine()) else {}),
            **({"cost": cost} if (cost := counters.live_cost()) else {}),
        }

    def write(self, state: str, message: str = "") -> None:
        try:
            write_progress(self.path, self.snapshot(state, message))
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                console.warn(f"cannot write the progress file {self.path} ({exc}); the run goes on, and the "
                             f"file is tried again every {INTERVAL_S:g} s")

    async def _tick(self) -> None:
        while True:
            self.write(PAUSED if self.budget.paused else RUNNING)
            await asyncio.sleep(INTERVAL_S)

    def start(self) -> None:
        remove_stale_temporaries(self.path)
        self._task = asyncio.create_task(self._tick())

    def close(self, state: str = FINISHED, message: str = "") -> None:
        """Stop ticking and write the final snapshot."""
        if self._task is not None:
            self._task.cancel()
        self.write(state, message)
