"""A replica that accepts requests and never answers, found while its requests wait (one watch per worker process).

The threshold is `hang_factor` times the recent p99 latency of this process's answered requests (at least
`hang_floor_s`: OutlierRules). A replica that has answered nothing for longer than the threshold, while another
replica answered within it (or answered and is now idle: the end of a run), and holds at least `HANG_MIN_OVERDUE`
requests older than it, is taken for hung. Silence, not a request's own age, is the sign: a replica that stopped
mid-generation answered other requests after the ones it holds were sent. A slow replica still answers and is not
taken for a hung one; a fleet paused as a whole (a weight update) answers nothing anywhere, and nothing is given up;
with one replica there is no peer to compare with, and nothing is watched.

Each request taken for hung is sent to another replica as well (its caller's `elsewhere`), and the replica it was
sent to keeps it: the first answer wins and the other request is cancelled. Silence on a busy machine can look like
a hang (replicas that share CPUs, answers that come in bursts); a wrong guess then costs a second generation, never a
failed request. The replica is charged a timeout, which counts towards its ejection, only when the other replica
answered first; where that one fails, the request is given up as a timeout and its caller sends it on (app.py). A
request without an `elsewhere` is given up at once.
"""

import asyncio
import logging
import math
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, Awaitable, Callable, Coroutine, Generic, TypeVar

from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.responses_api_models.vllm_model.routing import ReplicaRouter

logger = logging.getLogger(__name__)
HANG_MIN_SAMPLES = 20  # answered requests in this process before a p99 is trusted
HANG_SAMPLES = 512
HANG_CHECK_S = 0.25
# A replica in service is taken for hung only with this many overdue requests: one long generation alone on its
# replica (the tail of a run) has nothing else to answer, and is not a hung replica. An ejected replica's probe is
# alone by design, and is taken for hung by itself.
HANG_MIN_OVERDUE = 2
T = TypeVar("T")


class AnsweredElsewhere(RequestFailed, Generic[T]):
    """A request its replica held without answering, answered by another replica: a timeout of the replica it was
    sent to (the router counts it), and `answer` for its caller."""

    def __init__(self, message: str, answer: T) -> None:
        super().__init__(FailureClass.TIMEOUT, message)
        self.answer = answer


@dataclass(slots=True)
class _Watched:
    index: int
    sent_at: float
    timeout: asyncio.Timeout
    elsewhere: Callable[[], Coroutine[Any, Any, Any]] | None


class HangWatch:
    """Finds requests a replica accepted and never answers (module docstring).

    Each request runs under `watched`; a task started with the first request checks every `HANG_CHECK_S`, sends the
    requests it finds hung elsewhere too, and ends each when its second try has ended."""

    def __init__(self, router: ReplicaRouter) -> None:
        self.router = router
        self._latencies: deque[float] = deque(maxlen=HANG_SAMPLES)
        self._watched: dict[int, _Watched] = {}
        self._task: asyncio.Task[None] | None = None
        # The watched requests taken for hung, by key: the task of their second try (None: given up at once).
        self._suspects: dict[int, asyncio.Task[Any] | None] = {}

    def threshold_s(self) -> float | None:
        """How old a request must be to be taken for hung; None until enough requests were answered."""
        if len(self._latencies) < HANG_MIN_SAMPLES:
            return None
        ordered = sorted(self._latencies)
        p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
        return max(self.router.rules.hang_floor_s, self.router.rules.hang_factor * p99)

    async def watched(self, index: int, request: Awaitable[T], deadline: float | None = None,
                      elsewhere: Callable[[], Coroutine[Any, Any, T]] | None = None) -> T:
        """Await `request` (to replica `index`), given up as a timeout at `deadline` (the event loop's time; None:
        none) or when the watch finds it hung; then `elsewhere` (the same request to another replica), if given,
        is tried too, and its answer, if it comes first, is raised as `AnsweredElsewhere`."""
        watch = self.router.replicas > 1  # with one replica there is no peer to tell a hung one from a slow fleet
        if watch and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._watch())
        sent_at = self.router.clock()
        key = 0
        try:
            async with asyncio.timeout_at(deadline) as timeout:
                if not watch:
                    return await request
                key = id(timeout)
                self._watched[key] = _Watched(index, sent_at, timeout, elsewhere)
                result = await request
        except TimeoutError:
            if not timeout.expired():
                raise
            raise self._given_up(key, index, self.router.clock() - sent_at) from None
        finally:
            if key:
                del self._watched[key]
                _settle(self._suspects.pop(key, None))
        self._latencies.append(self.router.clock() - sent_at)
        return result

    def _given_up(self, key: int, index: int, waited: float) -> RequestFailed:
        if key not in self._suspects:
            return RequestFailed(FailureClass.TIMEOUT,
                                 f"no answer from replica {index} within the request's time ({waited:.1f} s)")
        second = self._suspects[key]  # settled as the request leaves the watch
        message = f"replica {index} answered nothing for {waited:.1f} s while the others answered"
        if second is None or not second.done() or second.cancelled():
            return RequestFailed(FailureClass.TIMEOUT, message)
        if (error := second.exception()) is not None:
            return RequestFailed(FailureClass.TIMEOUT, f"{message}; on another replica it failed too: {error}")
        return AnsweredElsewhere(f"{message}; another replica answered it", second.result())

    async def _watch(self) -> None:
        while self._watched:
            await asyncio.sleep(HANG_CHECK_S)
            self.check()

    def check(self) -> int:
        """Take the requests that are hung now for hung (module docstring); how many."""
        threshold = self.threshold_s()
        if threshold is None:
            return 0
        now = self.router.clock()
        overdue: dict[int, list[int]] = {}
        for key, entry in self._watched.items():
            if key not in self._suspects and now - entry.sent_at > threshold and not entry.timeout.expired():
                overdue.setdefault(entry.index, []).append(key)
        hung = []
        for index, keys in overdue.items():
            silent = now - self.router.last_answered(index) > threshold
            enough = len(keys) >= (1 if self.router.on_probation(index) else HANG_MIN_OVERDUE)
            if silent and enough and self.router.peer_answers(index, threshold):
                logger.info("replica %d answered nothing for %.1f s while the others answered; its %d requests "
                            "that old go to another replica too", index, now - self.router.last_answered(index),
                            len(keys))
                hung += keys
        loop = asyncio.get_running_loop()
        for key in hung:
            entry = self._watched[key]
            if entry.elsewhere is None:
                self._suspects[key] = None
                entry.timeout.reschedule(loop.time())
            else:
                second: asyncio.Task[Any] = loop.create_task(entry.elsewhere())
                self._suspects[key] = second
                second.add_done_callback(partial(self._second_ended, key))
        return len(hung)

    def _second_ended(self, key: int, second: "asyncio.Task[Any]") -> None:
        """The second try of a hung request ended: so does the first, if it is still waiting."""
        entry = self._watched.get(key)
        if entry is not None and self._suspects.get(key) is second and not entry.timeout.expired():
            entry.timeout.reschedule(asyncio.get_running_loop().time())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for second in self._suspects.values():
            _settle(second)


def _settle(second: "asyncio.Task[Any] | None") -> None:
    """Cancel a second try that is no longer wanted; one that failed has its exception taken (so asyncio does not
    report it as never retrieved)."""
    if second is None:
        return
    if not second.done():
        second.cancel()
    elif not second.cancelled():
        second.exception()
