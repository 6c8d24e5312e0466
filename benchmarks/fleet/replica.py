"""A simulated vLLM replica on the event loop's clock, time-scaled: `generate` answers when the engine's simulated
time reaches the request's finish.

`SimClock` maps the loop's monotonic clock to simulated seconds (`scale` simulated seconds per wall second), shared
by every replica of a fleet. The replica keeps at most one timer: for the next finish it can foresee; requests that
arrive in between are admitted at their own arrival times when the engine catches up, so a late timer delays an
answer but never changes the simulated schedule. `lag_s` counts how late answers went out (simulated seconds): a
harness whose CPU cannot keep up shows there first.

A replica can be killed (every request in it fails with `ReplicaDown`, its prefix cache is lost, new requests fail
at once) and started again, empty.
"""

import asyncio
from dataclasses import dataclass

from benchmarks.fleet.engine import BatchEngine, EngineStats, Seq, SimRequest
from benchmarks.fleet.profile import ReplicaProfile


class ReplicaDown(ConnectionError):
    """The replica died (or was dead) while the request needed it."""


class SimClock:
    """Simulated seconds since the clock was made: `scale` of them per second of the running loop's clock."""

    def __init__(self, scale: float) -> None:
        if scale <= 0:
            raise ValueError(f"time scale must be positive, got {scale}")
        self.scale = scale
        self._loop = asyncio.get_running_loop()
        self._start = self._loop.time()

    def now(self) -> float:
        return (self._loop.time() - self._start) * self.scale

    def loop_time(self, sim_s: float) -> float:
        """The loop time at which simulated time reaches `sim_s`."""
        return self._start + sim_s / self.scale


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


class SimReplica:
    def __init__(self, profile: ReplicaProfile, clock: SimClock) -> None:
        self.profile = profile
        self.clock = clock
        self.engine = BatchEngine(profile)
        self.alive = True
        self.lag_s = 0.0  # simulated seconds answers went out after their finish, summed
        self.lagged = 0
        self._futures: dict[int, asyncio.Future[Completion]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_for = 0.0  # the simulated time the timer was set for

    async def generate(self, request: SimRequest) -> Completion:
        """Run `request` through the batch; its completion once simulated time reaches its last token."""
        if not self.alive:
            raise ReplicaDown("the replica is down")
        idle = not self.engine.batch and not self.engine.waiting
        seq = self.engine.submit(request, self.clock.now())
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._futures[seq.seq_id] = future
        # A busy engine's timer already covers this request unless it could finish before the foreseen finish.
        if idle or self._timer is None or request.output_tokens <= self.engine.steps_left() + 1:
            self._catch_up(self.clock.now())
        try:
            return await future
        except asyncio.CancelledError:
            if self.alive and seq.finished_at < 0:
                self._catch_up(self.clock.now())
                self.engine.abort(seq)
                self._arm()
            raise
        finally:
            self._futures.pop(seq.seq_id, None)

    def snapshot(self) -> ReplicaSnapshot:
        if self.alive:
            self.engine.advance(self.clock.now())
        return ReplicaSnapshot(self.clock.now(), self.alive, self.engine.batch, len(self.engine.waiting),
                               self.engine.stats.copy(), self.lag_s, self.lagged)

    def kill(self) -> None:
        """Die: every request in the replica fails, and so does every new one until `revive`."""
        self.alive = False
        self._cancel_timer()
        for seq in self.engine.drop_all():
            future = self._futures.pop(seq.seq_id, None)
            if future is not None and not future.done():
                future.set_exception(ReplicaDown("the replica died"))

    def revive(self) -> None:
        """Start again, empty (a restarted vLLM has no prefix cache)."""
        if not self.alive:
            stats = self.engine.stats
            self.engine = BatchEngine(self.profile)
            self.engine.stats = stats
            self.engine.t = self.clock.now()
            self.alive = True

    def _catch_up(self, now: float) -> None:
        for seq in self.engine.advance(now):
            self._answer(seq, now)
        self._arm()

    def _answer(self, seq: Seq, now: float) -> None:
        late = now - seq.finished_at
        if late > 0:
            self.lag_s += late
            self.lagged += 1
        future = self._futures.pop(seq.seq_id, None)
        if future is not None and not future.done():
            future.set_result(Completion(seq.request.output_tokens, seq.cached_tokens,
                                         seq.admitted_at - seq.arrived_at, seq.finished_at - seq.arrived_at,
                                         seq.preemptions))

    def _arm(self) -> None:
        at = self.engine.next_finish_at()
        if at is None:
            self._cancel_timer()
            return
        if self._timer is not None and self._timer_for == at:
            return
        self._cancel_timer()
        self._timer_for = at
        self._timer = asyncio.get_running_loop().call_at(self.clock.loop_time(at), self._fire)

    def _fire(self) -> None:
        self._timer = None
        # The loop may wake a little before the time it was asked for: that time has come all the same.
        self._catch_up(max(self.clock.now(), self._timer_for))

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
