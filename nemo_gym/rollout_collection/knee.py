"""Automatic concurrency by throughput: keep raising the number of rollouts in flight while the throughput grows
with it, and stop at the knee, where more in flight only makes each rollout wait longer.

A fleet of vLLM replicas answers more per second as its batches fill, up to the point where every replica's batch
is full (or its KV cache is); beyond it a request only queues, so the throughput stays flat and the latency grows
with the number in flight (Little's law). With multi-turn rollouts it can even fall: sessions queued behind full
batches lose their cached prefixes to the running ones and compute them again. `ThroughputKnee` finds the knee
while the run goes, with no setting by hand. It is a `ConcurrencyPolicy` of the collector's `AdaptiveLimit`
(concurrency.py), beside `Aimd`, and takes `Aimd`'s rule for 429s from a rate-limited endpoint as it is.

- A measurement is one round: as many finished rollouts as the level (at least `MIN_WINDOW`), counted once the
  level has settled: half a round after the first rollout admitted since the last change finished (after a cut,
  once the rollouts beyond the new level have drained).
- The level climbs from the gate's initial level, doubling while each doubling pays at least `DOUBLING_GAIN` of a linear
  rise in throughput, then by `STEP` (a replica's batch gets slower as it fills, so the rise flattens before the
  knee). A step pays when the throughput rose by at least `KNEE_GAIN` of what a linear rise would give; above the
  knee it is nothing or less.
- The run's first round is measured again before it counts: it ran while connections opened and caches were cold,
  and a level judged against it looked like a gain (on the instant stub, 64 -> 128 "paid" on that alone).
- Every step is measured for two rounds and judged on both (a round's throughput varies by a few percent when
  rollout lengths vary a lot, and by more on a busy machine: one lucky round walked the level up a flat curve);
  if it does not pay, the level returns to the last one that did and holds there. A step whose first quarter round
  is already `EARLY_DROP` below that level's throughput is given up at once: overshooting costs throughput while it
  lasts.
- Held, every `REPROBE_ROUNDS` rounds it tries one `STEP` higher (a replica came back, the rollouts changed) and
  climbs on if that pays `PROBE_GAIN` times as much over two rounds, judged against the mean of the level's recent
  rounds (beyond the knee the throughput is flat, and a lucky round must not walk the level up). A held round far
  below that mean (the fleet shrank) does not move the level: the rollouts in flight queue on the replicas left,
  which stay full.
- A rollout that met a 429 hands the decision to `Aimd` (cut by its factor, once per round), and the level holds
  there: the endpoint said where its limit is. The cut level becomes the one to return to (its first held round
  measures it), so nothing above it is taken up again before `REPROBE_ROUNDS` held rounds have passed; then it
  probes as above, a probe that does not pay comes back to the cut level, and the next 429 cuts again.
"""

import math
import time
from dataclasses import dataclass
from typing import Callable, Literal

from nemo_gym.rollout_collection.concurrency import INITIAL_LEVEL, Aimd, Outcome

# The ceiling when the user set none: 64 replicas of 256 sequences. The level stays near the knee, far below it
# for a smaller fleet; the collector opens workers and connections only as the level rises.
AUTOMATIC_CEILING = 16384
KNEE_GAIN = 0.1
DOUBLING_GAIN = 0.25  # doubling goes on while the last doubling paid this share of a linear rise
STEP = 1.25
MIN_WINDOW = 128
EARLY_DROP = 0.1
REPROBE_ROUNDS = 8
PROBE_GAIN = 2.0  # a probe from a held level must pay this many times KNEE_GAIN, over two rounds
DROP_SHARE = 0.5  # a held round below this share of the level's throughput does not count (the fleet shrank)
HOLD_WEIGHT = 0.25  # weight of a held round in the level's throughput (an exponential mean of its rounds)

Mode = Literal["climb", "hold"]


def first_level(rollouts: int, ceiling: int) -> int:
    """The level a run of `rollouts` starts at: one shorter than a round (`MIN_WINDOW`) never measures one, so it
    starts with all of them in flight (up to `ceiling`), as a fixed setting would; a longer one at INITIAL_LEVEL."""
    return min(ceiling, rollouts) if rollouts < MIN_WINDOW else min(ceiling, INITIAL_LEVEL)


@dataclass(frozen=True)
class Point:
    """A level and the throughput measured at it (finished rollouts per second)."""

    level: int
    throughput: float


class ThroughputKnee:
    """Raise the level while throughput grows, hold at the knee (see the module docstring)."""

    def __init__(self, ceiling: int, *, gain: float = KNEE_GAIN, clock: Callable[[], float] = time.monotonic) -> None:
        self.ceiling = ceiling
        self.gain = gain
        self.clock = clock
        self.mode: Mode = "climb"
        self.reason = "climbing while the throughput grows with the level"  # what the last change was made on
        self.best: Point | None = None  # the highest level that paid, with its latest throughput
        self.points: list[Point] = []  # every measurement, in order
        self._aimd = Aimd(ceiling)
        self._factor = 2.0
        self._first_look: Point | None = None  # a step's first round, when it did not pay
        self._probing = False  # climbing from a held level
        self._held_rounds = 0
        self._changed_at = 0  # the gate's admission count when the level last changed
        self._settled = False
        self._count = 0
        self._started = 0.0

    def next_level(self, level: int, outcome: Outcome, admitted: int) -> int:
        if outcome.rate_limited:
            cut = self._aimd.next_level(level, outcome, admitted)
            if cut != level:
                # The level that met the 429 no longer paid: the cut level is the one a probe comes back to, and the
                # hold before probing starts afresh.
                self.mode, self.best, self._first_look, self._probing, self._held_rounds = "hold", None, None, False, 0
                self._restart(admitted)
                self.reason = f"cut: a rollout met {outcome.rate_limited} 429s"
            return cut
        if outcome.failed:
            return level
        now = self.clock()
        window = max(level, MIN_WINDOW)
        if not self._settled:
            if outcome.admitted > self._changed_at:
                self._count += 1
            if self._count > window // 2:  # half a round past the first rollout the new level let in
                self._settled, self._count, self._started = True, 0, now
            return level
        self._count += 1
        early = self._early_drop(level, now, window)
        if self._count < window and not early:
            return level
        measured = Point(level, self._count / max(now - self._started, 1e-9))
        self.points.append(measured)
        self.reason = f"{measured.throughput:.1f} rollouts/s at {measured.level} in flight"
        self._count, self._started = 0, now
        new = self._decide(measured)
        if new != level:
            self._restart(admitted)
        return new

    def _early_drop(self, level: int, now: float, window: int) -> bool:
        """A step up whose first quarter round is already well below the level it left."""
        best = self.best
        if best is None or level <= best.level or self._count < max(window // 4, MIN_WINDOW):
            return False
        return self._count / max(now - self._started, 1e-9) < (1 - EARLY_DROP) * best.throughput

    def _pays(self, point: Point) -> float | None:
        """The share of a linear rise over `best` that `point` gained (None when it is not above `best`)."""
        best = self.best
        if best is None:
            return math.inf
        if point.level <= best.level:
            return None
        return (point.throughput / best.throughput - 1) / (point.level / best.level - 1)

    def _decide(self, point: Point) -> int:
        best = self.best
        if self.mode == "hold":
            if best is None:  # held by a 429 before any round was measured: this round is the level's throughput
                self.best = best = point
            if point.level == best.level and point.throughput >= DROP_SHARE * best.throughput:
                # the level's throughput as the mean of its recent rounds: a probe is judged against that
                self.best = Point(point.level, (1 - HOLD_WEIGHT) * best.throughput + HOLD_WEIGHT * point.throughput)
            self._held_rounds += 1
            if self._held_rounds < REPROBE_ROUNDS or point.level >= self.ceiling:
                return point.level
            self._held_rounds, self.mode, self._factor, self._probing = 0, "climb", STEP, True
            return self._step(point.level)
        if best is None and len(self.points) == 1:  # the run's first round: connections opening, caches cold
            return point.level  # measured again
        first, self._first_look = self._first_look, None
        if first is not None and first.level == point.level:
            point = Point(point.level, (first.throughput + point.throughput) / 2)
        gained = self._pays(point)
        paid = gained is not None and gained >= self.gain * (PROBE_GAIN if self._probing else 1.0)
        holding_up = best is not None and point.throughput >= (1 - EARLY_DROP) * best.throughput
        if first is None and holding_up:
            self._first_look = point  # a step is judged on two rounds: one round's noise neither makes nor breaks it
            return point.level
        if not paid:
            self.mode, self._held_rounds, self._probing = "hold", 0, False
            return best.level if best is not None else point.level
        self._probing = False
        self.best = point
        if gained is not None and gained < DOUBLING_GAIN:
            self._factor = STEP
        if point.level >= self.ceiling:
            self.mode = "hold"
            return point.level
        return self._step(point.level)

    def _step(self, level: int) -> int:
        return min(self.ceiling, max(level + 1, math.ceil(level * self._factor)))

    def _restart(self, admitted: int) -> None:
        self._changed_at, self._settled, self._count = admitted, False, 0
