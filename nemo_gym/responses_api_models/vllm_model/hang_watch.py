"""A replica that accepts requests and never answers, found while its requests wait (one watch per worker process).

The threshold is `hang_factor` times the recent p99 latency of this process's answered requests (at least
`hang_floor_s`: OutlierRules). A replica that has answered nothing for longer than the threshold, while another
replica answered within it (or answered and is now idle: the end of a run), and holds at least `HANG_MIN_OVERDUE` requests older than it, is taken for hung: those
requests are given up as timeouts, which the router counts towards the replica's ejection, and the model server
sends each to another replica. Silence, not a request's own age, is the sign: a replica that stopped mid-generation
answered other requests after the ones it holds were sent. A slow replica still answers and is not taken for a hung
one; a fleet paused as a whole (a weight update) answers nothing anywhere, and nothing is given up; with one replica
there is no peer to compare with, and nothing is watched.
"""

import asyncio
import math
from collections import deque
from contextlib import contextmanager
from typing import Awaitable, Iterator, TypeVar

from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.responses_api_models.vllm_model.routing import ReplicaRouter

HANG_MIN_SAMPLES = 20  # answered requests in this process before a p99 is trusted
HANG_SAMPLES = 512
HANG_CHECK_S = 0.25
# A replica in service is taken for hung only with this many overdue requests: one long generation alone on its
# replica (the tail of a run) has nothing else to answer, and is not a hung replica. An ejected replica's probe is
# alone by design, and is given up by itself.
HANG_MIN_OVERDUE = 2
T = TypeVar("T")


class HangWatch:
    """Finds requests a replica accepted and never answers (module docstring).

    Each request runs under `watched`; a task started with the first request checks every `HANG_CHECK_S` and ends
    the requests it finds hung with a `RequestFailed` timeout."""

    def __init__(self, router: ReplicaRouter) -> None:
        self.router = router
        self._latencies: deque[float] = deque(maxlen=HANG_SAMPLES)
        self._watched: dict[int, tuple[int, float, asyncio.Timeout]] = {}
        self._task: asyncio.Task[None] | None = None
        self._hung: set[int] = set()  # the watched timeouts this watch ended

    def threshold_s(self) -> float | None:
        """How old a request must be to be taken for hung; None until enough requests were answered."""
        if len(self._latencies) < HANG_MIN_SAMPLES:
            return None
        ordered = sorted(self._latencies)
        p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
        return max(self.router.rules.hang_floor_s, self.router.rules.hang_factor * p99)

    @contextmanager
    def _registered(self, index: int, sent_at: float, timeout: asyncio.Timeout) -> Iterator[None]:
        key = id(timeout)
        self._watched[key] = (index, sent_at, timeout)
        try:
            yield
        finally:
            del self._watched[key]

    async def watched(self, index: int, request: Awaitable[T], deadline: float | None = None) -> T:
        """Await `request` (to replica `index`), given up as a timeout if the watch finds it hung or at `deadline`
        (the event loop's time; None: none)."""
        watch = self.router.replicas > 1  # with one replica there is no peer to tell a hung one from a slow fleet
        if watch and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._watch())
        sent_at = self.router.clock()
        try:
            async with asyncio.timeout_at(deadline) as timeout:
                if not watch:
                    return await request
                with self._registered(index, sent_at, timeout):
                    result = await request
        except TimeoutError:
            if not timeout.expired():
                raise
            waited = self.router.clock() - sent_at
            if id(timeout) in self._hung:
                self._hung.discard(id(timeout))
                message = f"replica {index} answered nothing for {waited:.1f} s while the others answered"
            else:
                message = f"no answer from replica {index} within the request's time ({waited:.1f} s)"
            raise RequestFailed(FailureClass.TIMEOUT, message) from None
        self._latencies.append(self.router.clock() - sent_at)
        return result

    async def _watch(self) -> None:
        while self._watched:
            await asyncio.sleep(HANG_CHECK_S)
            self.check()

    def check(self) -> int:
        """End the requests that are hung now; how many."""
        threshold = self.threshold_s()
        if threshold is None:
            return 0
        now = self.router.clock()
        overdue: dict[int, list[tuple[int, asyncio.Timeout]]] = {}
        for key, (index, sent_at, timeout) in self._watched.items():
            if now - sent_at > threshold and not timeout.expired():
                overdue.setdefault(index, []).append((key, timeout))
        hung = []
        for index, entries in overdue.items():
            silent = now - self.router.last_answered(index) > threshold
            enough = len(entries) >= (1 if self.router.on_probation(index) else HANG_MIN_OVERDUE)
            if silent and enough and self.router.peer_answers(index, threshold):
                hung += entries
        for key, timeout in hung:
            self._hung.add(key)
            timeout.reschedule(asyncio.get_running_loop().time())
        return len(hung)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
