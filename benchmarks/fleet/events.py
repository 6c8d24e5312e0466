"""Simulated time for the in-process fleet: a queue of timed callbacks, run in time order, the clock jumping from
one to the next. Nothing waits on the wall clock, so an hour of fleet time takes what its events cost in CPU, and
a run gives the same numbers on an idle machine as on a loaded one.
"""

import heapq
import itertools
from typing import Callable


class Timer:
    """A scheduled callback; `cancel` before it runs and it never does."""

    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class EventQueue:
    def __init__(self) -> None:
        self._now = 0.0
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()  # callbacks due at the same time run in the order they were scheduled

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(max(when, self._now), callback)
        heapq.heappush(self._heap, (timer.when, next(self._order), timer))
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return self.call_at(self._now + delay, callback)

    def run_until(self, end: float) -> None:
        """Run every callback due by `end` (including those they schedule), then set the clock to `end`."""
        heap = self._heap
        while heap and heap[0][0] <= end:
            when, _, timer = heapq.heappop(heap)
            if timer.cancelled:
                continue
            self._now = when
            timer.callback()
        self._now = max(self._now, end)
