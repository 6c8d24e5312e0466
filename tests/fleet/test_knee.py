"""ThroughputKnee on the collector's AdaptiveLimit, against fleets whose throughput curve is known: the level climbs
to the knee and holds there, comes back from a cliff, climbs again when the fleet grows, and a 429 cuts it as Aimd
does. Simulated time (benchmarks/fleet/events.py): the same run every time, whatever the machine's load."""

import math
import random
from typing import Callable

import pytest

from benchmarks.fleet.events import EventQueue
from benchmarks.fleet.inprocess import admit_now
from nemo_gym.rollout_collection.concurrency import DECREASE, INITIAL_LEVEL, AdaptiveLimit, Outcome
from nemo_gym.rollout_collection.knee import MIN_WINDOW, REPROBE_ROUNDS, STEP, Point, ThroughputKnee, first_level

Curve = Callable[[int], float]  # rollouts in flight -> rollouts/s the fleet finishes


def saturating(knee: int, rate: float) -> Curve:
    """A fleet that finishes `rate` rollouts/s once `knee` are in flight, proportionally fewer below."""
    return lambda in_flight: rate * min(in_flight, knee) / knee


def cliff(knee: int, rate: float, beyond: float) -> Curve:
    """Saturating, then down to `beyond` of the rate past 1.4x the knee (prefix caches thrashing)."""
    return lambda in_flight: rate * (min(in_flight, knee) / knee if in_flight <= 1.4 * knee else beyond)


class Driver:
    """A closed loop: the gate admits rollouts; each takes in_flight / curve(in_flight) seconds on average (Little's
    law), spread as rollout lengths are (lognormal, a fixed seed)."""

    def __init__(self, curve: Curve, ceiling: int = 1 << 16) -> None:
        self.queue = EventQueue()
        self.curve = curve
        self.policy = ThroughputKnee(ceiling, clock=self.queue.now)
        self.limit = AdaptiveLimit(ceiling, self.policy)
        self.finished = 0
        self.finished_at: list[float] = []
        self.rate_limited_every = 0  # every n-th rollout meets a 429 when set
        self.levels: list[tuple[float, int]] = []
        self.random = random.Random(7)

    def run(self, until: float) -> None:
        self._fill()
        self.queue.run_until(until)

    def throughput(self, since: float) -> float:
        """Rollouts/s finished from `since` to now."""
        return sum(t >= since for t in self.finished_at) / (self.queue.now() - since)

    def median_level(self, since: float) -> int:
        levels = sorted(level for t, level in self.levels if t >= since)
        return levels[len(levels) // 2]

    def _fill(self) -> None:
        while (admitted := admit_now(self.limit)) is not None:
            self._start(admitted)

    def _start(self, admitted: int) -> None:
        in_flight = self.limit.in_flight
        latency = in_flight / self.curve(in_flight) * self.random.lognormvariate(-0.125, 0.5)  # mean 1
        started = self.queue.now()
        self.queue.call_later(latency, lambda: self._finish(admitted, started))

    def _finish(self, admitted: int, started: float) -> None:
        self.finished += 1
        self.finished_at.append(self.queue.now())
        limited = 1 if self.rate_limited_every and self.finished % self.rate_limited_every == 0 else 0
        self.limit.release(Outcome(admitted, self.queue.now() - started, limited, failed=False))
        self.levels.append((self.queue.now(), self.limit.level))
        self._fill()


def test_it_climbs_to_the_knee_and_holds_there() -> None:
    driver = Driver(saturating(knee=1024, rate=100.0))
    driver.run(2000.0)
    assert driver.throughput(since=1000.0) >= 0.97 * 100.0
    assert 1024 <= driver.median_level(since=1000.0) <= 1024 * STEP  # at the knee, not past it
    assert min(level for t, level in driver.levels if t >= 1000.0) >= 1024


def test_it_comes_back_from_a_cliff() -> None:
    driver = Driver(cliff(knee=1024, rate=100.0, beyond=0.5))
    driver.run(2000.0)
    assert driver.throughput(since=1000.0) >= 0.95 * 100.0  # the doubling past the cliff was given up early
    assert 1024 <= driver.median_level(since=1000.0) <= 1.4 * 1024


def test_held_it_climbs_again_when_the_fleet_grows() -> None:
    capacity = {"knee": 256}
    driver = Driver(lambda in_flight: 10.0 * min(in_flight, capacity["knee"]) / 256)
    driver.run(1500.0)
    assert 256 <= driver.median_level(since=1000.0) <= 256 * STEP ** 2
    capacity["knee"] = 1024  # three more replicas joined
    driver.queue.run_until(4000.0)
    assert driver.median_level(since=3000.0) >= 1024
    assert driver.throughput(since=3000.0) >= 0.95 * 40.0


def test_a_429_cuts_the_level_as_aimd_does_and_holds_it() -> None:
    driver = Driver(saturating(knee=4096, rate=200.0))
    driver.run(0.0)
    while driver.limit.level < 256:  # climbing, no 429 yet
        driver.queue.run_until(driver.queue.now() + 0.1)
    climbed, mode = driver.limit.level, driver.policy.mode
    assert climbed >= 256 and mode == "climb"
    driver.rate_limited_every = 1  # the endpoint now refuses: the next rollout meets a 429
    finished = driver.finished
    driver.queue.run_until(driver.queue.now() + 1.0)
    assert driver.finished > finished
    assert driver.limit.level == int(climbed * DECREASE)  # one cut for the round, however many 429s it met
    assert driver.policy.mode == "hold"


def test_a_round_is_at_least_min_window_rollouts() -> None:
    driver = Driver(saturating(knee=4, rate=1.0))  # a tiny fleet: rounds of 4 would be all noise
    driver.run(600.0)
    assert driver.policy.points
    assert len(driver.policy.points) <= driver.finished / MIN_WINDOW


def test_a_429_before_the_first_measured_round_holds_and_measures_on() -> None:
    driver = Driver(saturating(knee=1024, rate=100.0))
    driver.rate_limited_every = 10  # the tenth rollout meets a 429: the level is cut before any round was measured
    driver.run(0.0)
    while driver.limit.level == INITIAL_LEVEL:
        driver.queue.run_until(driver.queue.now() + 0.1)
    assert driver.limit.level == int(INITIAL_LEVEL * DECREASE) and not driver.policy.points
    driver.rate_limited_every = 0
    driver.queue.run_until(3000.0)  # eight held rounds of 128 rollouts at about one a second, then probes
    assert driver.policy.points  # the held level's rounds are measured, and it probes on from there
    assert driver.limit.level > int(INITIAL_LEVEL * DECREASE)


class OneByOne:
    """Rollouts that finish one at a time, each 1/curve(level) seconds after the last, on a fake clock: rounds with
    no noise at all, so each level's throughput is exactly the curve's."""

    def __init__(self, curve: Curve) -> None:
        self.now = 0.0
        self.curve = curve
        self.policy = ThroughputKnee(1 << 16, clock=lambda: self.now)
        self.level = 16
        self.admitted = 0

    def finish(self, rate_limited: int = 0) -> None:
        self.now += 1.0 / self.curve(self.level)
        self.admitted += 1
        outcome = Outcome(self.admitted, 1.0, rate_limited, failed=rate_limited > 0)
        self.level = self.policy.next_level(self.level, outcome, self.admitted)


def test_after_a_429_cut_the_level_holds_at_the_cut_and_a_probe_comes_back_to_it() -> None:
    """Held at 512 (the knee of a fleet saturated at 300), a 429 cuts to 358. The level that met the 429 is not one
    to return to: it holds at 358 for REPROBE_ROUNDS rounds, probes 448, and a probe that does not pay comes back to
    358, not to 512 (which it did: 512, 429 -> 358, probe 448, back to 512, 640, 512)."""
    fleet = OneByOne(saturating(knee=300, rate=100.0))
    while not (fleet.level == 512 and fleet.policy.mode == "hold"):
        fleet.finish()
    fleet.finish(rate_limited=1)
    cut = int(512 * DECREASE)
    assert fleet.level == cut == 358
    measured_at_cut = len(fleet.policy.points)
    changes: list[tuple[int, int]] = []  # (new level, rounds measured since the cut)
    while len(changes) < 4:
        level = fleet.level
        fleet.finish()
        if fleet.level != level:
            changes.append((fleet.level, len(fleet.policy.points) - measured_at_cut))
    probe = math.ceil(cut * STEP)
    assert [level for level, _ in changes] == [probe, cut, probe, cut]
    assert changes[0][1] >= REPROBE_ROUNDS  # nothing above the cut before the hold's rounds have passed


def test_a_run_too_short_to_measure_a_round_starts_with_all_its_rollouts_in_flight() -> None:
    assert first_level(50, ceiling=16384) == 50  # the README's main job: never waits on a level it cannot climb
    assert first_level(50, ceiling=8) == 8
    assert first_level(MIN_WINDOW - 1, ceiling=16384) == MIN_WINDOW - 1
    assert first_level(MIN_WINDOW, ceiling=16384) == INITIAL_LEVEL
    assert first_level(10_000, ceiling=4) == 4


def flat_but(level: int, finishes: int, rate: float) -> Curve:
    """A fleet that finishes 100 rollouts/s at any level, but its first `finishes` at `level` at `rate`."""
    seen = 0

    def curve(at: int) -> float:
        nonlocal seen
        if at != level:
            return 100.0
        seen += 1
        return rate if seen <= finishes else 100.0

    return curve


FIRST_ROUND = MIN_WINDOW // 2 + 1 + MIN_WINDOW  # finishes until a level's first round is measured: settling, then it


def _held_level(fleet: OneByOne) -> int:
    for _ in range(100 * MIN_WINDOW):
        fleet.finish()
        if fleet.policy.mode == "hold":
            return fleet.level
    raise AssertionError(f"never held: at {fleet.level}, {fleet.policy.points}")


def test_the_runs_first_round_is_measured_again_before_a_step_is_judged_against_it() -> None:
    """The first round runs at half speed (connections opening): judged against it, doubling on a flat fleet would
    look like a gain. Measured again, the doubling does not pay and the level holds where it started."""
    fleet = OneByOne(flat_but(16, FIRST_ROUND, 50.0))
    assert _held_level(fleet) == 16
    assert fleet.policy.points[0] == Point(16, pytest.approx(50.0)) and fleet.policy.best.level == 16


def test_a_step_is_judged_on_two_rounds_so_one_lucky_round_does_not_take_it() -> None:
    """On a flat fleet the first round at 32 is 15% faster by luck (a linear rise would be 100%, the knee asks 10%
    of it): the second round is not, and the step is judged on both."""
    fleet = OneByOne(flat_but(32, FIRST_ROUND, 115.0))
    assert _held_level(fleet) == 16
    assert [p.level for p in fleet.policy.points][-2:] == [32, 32]
