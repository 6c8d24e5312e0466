"""Progress of a collection run: a tqdm bar on a terminal, plain periodic lines in logs (SLURM, CI, nohup).

Recording a result only bumps counters; a background task redraws, so the hot path stays cheap at thousands of
rollouts per second and a stalled run still shows that it is alive.
"""

import asyncio
import sys
import time
from typing import Callable, TextIO

from tqdm import tqdm

_BAR_REFRESH_S = 0.5


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """Counts finished rollouts of one run; `total` includes those done by earlier runs (`initial`)."""

    def __init__(self, total: int, initial: int, interval_s: float, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.initial = initial
        self.interval_s = interval_s
        self.stream = stream
        self.succeeded = 0
        self.failed = 0
        self.reward_sum = 0.0
        self.started = time.monotonic()
        self._bar: tqdm | None = None
        self._shown = 0
        self._ticker: asyncio.Task | None = None
        self.detail: Callable[[], str] | None = None  # more for each line (the collector's concurrency, 429s...)

    def record_success(self, reward: float) -> None:
        self.succeeded += 1
        self.reward_sum += reward

    def record_failure(self) -> None:
        self.failed += 1

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.succeeded if self.succeeded else None

    @property
    def rate(self) -> float:
        return (self.succeeded + self.failed) / max(time.monotonic() - self.started, 1e-9)

    def _stats(self) -> str:
        mean = "n/a" if self.mean_reward is None else f"{self.mean_reward:.3f}"
        detail = f", {self.detail()}" if self.detail is not None else ""
        return f"mean reward {mean}, {self.failed} failed{detail}"

    def _draw(self) -> None:
        finished = self.succeeded + self.failed
        if self._bar is not None:
            self._bar.update(finished - self._shown)
            self._shown = finished
            self._bar.set_postfix_str(self._stats(), refresh=True)  # tqdm shows rollouts/s itself
            return
        done = self.initial + finished
        remaining = self.total - done
        eta = f", ETA {_duration(remaining / self.rate)}" if self.rate > 0 and remaining > 0 else ""
        percent = 100.0 * done / self.total if self.total else 100.0
        print(f"[collect] {done}/{self.total} rollouts ({percent:.1f}%), {self.rate:.1f} rollouts/s, "
              f"{self._stats()}{eta}", file=self.stream, flush=True)

    async def _tick(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            self._draw()

    def start(self) -> None:
        if self.stream.isatty():
            self._bar = tqdm(total=self.total, initial=self.initial, unit="rollout", file=self.stream,
                             dynamic_ncols=True, mininterval=_BAR_REFRESH_S)
            self._ticker = asyncio.create_task(self._tick(_BAR_REFRESH_S))
        else:
            self._ticker = asyncio.create_task(self._tick(self.interval_s))

    def close(self) -> None:
        """Stop redrawing, after one last line: where the run ended (in a log, the line the summary follows)."""
        if self._ticker is not None:
            self._ticker.cancel()
        self._draw()
        if self._bar is not None:
            self._bar.close()
