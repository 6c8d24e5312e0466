"""Adaptive concurrency: how many rollouts are in flight, found while a run goes rather than fixed up front.

`AdaptiveLimit` is the gate: at most `level` rollouts in flight, `ceiling` (num_samples_in_parallel) at most. A
`ConcurrencyPolicy` sees every finished rollout (`Outcome`) and says the next level; the gate only applies it.

`Aimd` finds the highest level an endpoint sustains without 429s, as TCP finds a link's rate: it starts at
`INITIAL_LEVEL` and doubles each round (a round: as many finished rollouts as the level) while no rollout failed as
rate-limited; such a rollout cuts the level by `DECREASE`, once per round (a rollout let in before the last cut does
not cut again), and from then on the level grows by one each round. Our model servers pace their endpoints
themselves (configured limits, or a rate learned from 429s: responses_api_models/rate_limits.py) and wait out the
429s they meet, so with them a rollout fails as rate-limited only when that was not enough; the collector's policy
(knee.py's `ThroughputKnee`, which takes `Aimd`'s cut) then only has to keep enough rollouts in flight.
"""

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

INITIAL_LEVEL = 64  # from 16, a 10,000-row run on the instant stub spent its first seconds climbing (long_runs)
DECREASE = 0.7


@dataclass(frozen=True)
class Outcome:
    """What one finished rollout tells the policy."""

    admitted: int  # the gate's admission count when this rollout was let in (`AdaptiveLimit.acquire`)
    latency_s: float  # from admission to result, attempts and backoff included
    # 429s that failed the rollout (`rate_limited`): a model server waits out the 429s it can and paces its endpoint
    # itself, so only what it could not absorb comes back as one.
    rate_limited: int
    failed: bool


class ConcurrencyPolicy(Protocol):
    reason: str  # what the level was last set on, for the progress line and file

    def next_level(self, level: int, outcome: Outcome, admitted: int) -> int:
        """The level after `outcome`; `admitted` is the gate's admission count now."""


class Aimd:
    """Additive increase, multiplicative decrease on 429s, with a doubling start (see the module docstring)."""

    def __init__(self, ceiling: int, decrease: float = DECREASE) -> None:
        self.ceiling = ceiling
        self.decrease = decrease
        self._cut_at = 0  # admissions when the level was last cut
        self._doubling = True
        self._credit = 0.0  # growth earned but not yet a whole rollout
        self.reason = "doubling while no rollout meets a 429"

    def next_level(self, level: int, outcome: Outcome, admitted: int) -> int:
        if outcome.rate_limited:
            if outcome.admitted < self._cut_at:
                return level  # let in before the last cut, which already answered it
            self._cut_at, self._doubling, self._credit = admitted, False, 0.0
            self.reason = f"cut: a rollout met {outcome.rate_limited} 429s; growing by one a round since"
            return max(1, int(level * self.decrease))
        if outcome.failed:
            return level
        self._credit += 1.0 if self._doubling else 1.0 / level
        grown = int(self._credit + 1e-9)  # `level` sums of 1/level make 1, whatever the rounding
        self._credit -= grown
        return min(self.ceiling, level + grown)


class Fixed:
    """The level stays where it started (a caller that asked for an exact concurrency)."""

    reason = "fixed: adaptive_concurrency is off"

    def next_level(self, level: int, outcome: Outcome, admitted: int) -> int:
        return level


LevelListener = Callable[[int, int, Outcome], None]  # (old level, new level, the outcome that changed it)


class AdaptiveLimit:
    """At most `level` holders at once; the level follows `policy` between 1 and `ceiling`."""

    def __init__(self, ceiling: int, policy: ConcurrencyPolicy | None = None,
                 initial: int = INITIAL_LEVEL) -> None:
        if ceiling < 1:
            raise ValueError(f"the concurrency ceiling must be at least 1, got {ceiling}")
        self.ceiling = ceiling
        self.policy: ConcurrencyPolicy = policy or Aimd(ceiling)
        self.level = max(1, min(ceiling, initial))
        self.in_flight = 0
        self.admitted = 0
        self.listeners: list[LevelListener] = []
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> int:
        """Wait for a place; the admission count that the holder's `Outcome.admitted` carries back."""
        if self.in_flight >= self.level or self._waiting:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():  # given a place, then cancelled: pass it on
                    self.in_flight -= 1
                    self._wake()
                elif waiter in self._waiting:
                    self._waiting.remove(waiter)
                raise
        else:
            self.in_flight += 1
        self.admitted += 1
        return self.admitted

    def release(self, outcome: Outcome | None) -> None:
        """Give the place back; `outcome` (None: the rollout was stopped) adjusts the level."""
        self.in_flight -= 1
        if outcome is not None:
            old = self.level
            self.level = max(1, min(self.ceiling, self.policy.next_level(old, outcome, self.admitted)))
            if self.level != old:
                for listener in self.listeners:
                    listener(old, self.level, outcome)
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self.in_flight < self.level:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
