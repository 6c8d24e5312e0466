"""A simulated vLLM replica on a clock: requests go in, and each comes out when simulated time reaches its last token.

The clock is a `Scheduler`: `LoopScheduler` runs simulated time on an asyncio loop's clock, `scale` simulated
seconds per wall second (the replicas fleet.py serves over HTTP); `events.EventQueue` runs it as fast as the CPU goes
(the in-process fleet). The replica keeps at most one timer, for the next finish it can foresee; requests that arrive
in between are admitted at their own arrival times when the engine catches up, so a late timer delays an answer but
never changes the simulated schedule. `lag_s` counts how late answers went out (simulated seconds): a process whose
CPU cannot keep up shows it there first.

A replica can be killed (every request in it fails with `ReplicaDown`, its prefix cache is lost, new requests fail
at once) and started again, empty, and slowed down (or sped up) mid-run.
"""

import asyncio
from dataclasses import dataclass
from typing import Callable, Protocol

from benchmarks.fleet.engine import BatchEngine, EngineStats, Seq, SimRequest
from benchmarks.fleet.profile import ReplicaProfile


class ReplicaDown(ConnectionError):
    """The replica died (or was dead) while the request needed it."""


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def now(self) -> float:
        """Simulated seconds."""

    def call_at(self, when: float, callback: Callable[[], None]) -> Cancellable:
        """Run `callback` once simulated time reaches `when`."""


class LoopScheduler:
    """Simulated time on the running asyncio loop: `scale` simulated seconds per second of the loop's clock."""

    def __init__(self, scale: float) -> None:
        if scale <= 0:
            raise ValueError(f"time scale must be positive, got {scale}")
        self.scale = scale
        self._loop = asyncio.get_running_loop()
        self._start = self._loop.time()

    def now(self) -> float:
        return (self._loop.time() - self._start) * self.scale

    def call_at(self, when: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return self._loop.call_at(self._start + when / self.scale, callback)


@dataclass(frozen=True)
class Completion:
    """What a finished request reports, in simulated seconds."""

    output_tokens: int
    cached_tokens: int
    queued_s: float  # from arrival to admission
    latency_s: float  # from arrival to the last token
    preemptions: int


@dataclass(frozen=True)
class ReplicaSnapshot:
    """A replica's counters at one moment; differences between two give a window's utilization."""

    at_s: float
    alive: bool
    running: int
    waiting: int
    stats: EngineStats
    lag_s: float
    lagged: int


Done = Callable[[Completion], None]
Failed = Callable[[ReplicaDown], None]


class SimReplica:
    def __init__(self, profile: ReplicaProfile, scheduler: Scheduler) -> None:
        self.profile = profile
        self.scheduler = scheduler
        self.engine = BatchEngine(profile)
        self.alive = True
        self.lag_s = 0.0  # simulated seconds answers went out after their finish, summed
        self.lagged = 0
        self._waiters: dict[int, tuple[Done, Failed]] = {}
        self._timer: Cancellable | None = None
        self._timer_for = 0.0  # the simulated time the timer was set for
        self._catching_up = False  # answering: a request submitted from an answer's callback waits for the loop

    def submit(self, request: SimRequest, done: Done, failed: Failed) -> Seq | None:
        """Put `request` into the batch: `done` gets its completion, or `failed` the replica's death. A dead replica
        calls `failed` at once (and returns None)."""
        if not self.alive:
            failed(ReplicaDown("the replica is down"))
            return None
        idle = not self.engine.batch and not self.engine.waiting
        seq = self.engine.submit(request, self.scheduler.now())
        self._waiters[seq.seq_id] = (done, failed)
        # A busy engine's timer already covers this request unless it could finish before the foreseen finish.
        if not self._catching_up and (idle or self._timer is None
                                      or request.output_tokens <= self.engine.steps_left() + 1):
            self._catch_up(self.scheduler.now())
        return seq

    async def generate(self, request: SimRequest) -> Completion:
        """`submit` for a coroutine: the completion once simulated time reaches the request's last token; a
        cancelled caller takes its request out of the batch (vLLM aborts a request whose connection closed)."""
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()

        def done(completion: Completion) -> None:
            if not future.done():
                future.set_result(completion)

        def failed(error: ReplicaDown) -> None:
            if not future.done():
                future.set_exception(error)

        seq = self.submit(request, done, failed)
        try:
            return await future
        except asyncio.CancelledError:
            if seq is not None:
                self.abort(seq)
            raise

    def abort(self, seq: Seq) -> None:
        if self.alive and self._waiters.pop(seq.seq_id, None) is not None:
            self._catch_up(self.scheduler.now())
            self.engine.abort(seq)
            self._arm()

    def snapshot(self) -> ReplicaSnapshot:
        if self.alive:
            self._catch_up(self.scheduler.now())
        return ReplicaSnapshot(self.scheduler.now(), self.alive, self.engine.batch, len(self.engine.waiting),
                               self.engine.stats.copy(), self.lag_s, self.lagged)

    def retime(self, profile: ReplicaProfile) -> None:
        """From now on, steps take `profile`'s times; the steps simulated so far keep theirs."""
        if self.alive:
            self._catch_up(self.scheduler.now())
        self.profile = profile
        self.engine.retime(profile)
        if self.alive:
            self._arm()

    def kill(self) -> None:
        """Die: every request in the replica fails, and so does every new one until `revive`."""
        self.alive = False
        self._cancel_timer()
        self.engine.drop_all()
        waiters, self._waiters = self._waiters, {}
        for _, failed in waiters.values():
            failed(ReplicaDown("the replica died"))

    def revive(self) -> None:
        """Start again, empty (a restarted vLLM has no prefix cache)."""
        if not self.alive:
            stats = self.engine.stats
            self.engine = BatchEngine(self.profile)
            self.engine.stats = stats
            self.engine.t = self.scheduler.now()
            self.alive = True

    def _catch_up(self, now: float) -> None:
        """Simulate up to `now`, answer what finished, and set the timer for the next finish."""
        self._catching_up = True
        try:
            while True:  # answers may submit more (a closed loop), to be admitted at `now` too
                finished = self.engine.advance(now)
                if not finished:
                    break
                for seq in finished:
                    late = now - seq.finished_at
                    if late > 0:
                        self.lag_s += late
                        self.lagged += 1
                    waiter = self._waiters.pop(seq.seq_id, None)
                    if waiter is not None:
                        waiter[0](Completion(seq.request.output_tokens, seq.cached_tokens,
                                             seq.admitted_at - seq.arrived_at, seq.finished_at - seq.arrived_at,
                                             seq.preemptions))
        finally:
            self._catching_up = False
        self._arm()

    def _arm(self) -> None:
        at = self.engine.next_finish_at()
        if at is None:
            self._cancel_timer()
            return
        if self._timer is not None and self._timer_for == at:
            return
        self._cancel_timer()
        self._timer_for = at
        self._timer = self.scheduler.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        # A loop may wake a little before the time it was asked for: that time has come all the same.
        self._catch_up(max(self.scheduler.now(), self._timer_for))

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
