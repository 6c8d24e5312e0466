"""The adaptive concurrency limit: it starts low, doubles while nothing meets a 429, cuts once per round when one
does, grows by one a round after that, and never lets more than its level in flight or grows past the ceiling."""

import asyncio

import pytest

from nemo_gym.rollout_collection.concurrency import DECREASE, INITIAL_LEVEL, AdaptiveLimit, Aimd, Fixed, Outcome
from nemo_gym.rollout_collection.knee import MIN_WINDOW, ThroughputKnee


def _fine(admitted: int) -> Outcome:
    return Outcome(admitted=admitted, latency_s=1.0, rate_limited=0, failed=False)


def _limited(admitted: int) -> Outcome:
    return Outcome(admitted=admitted, latency_s=1.0, rate_limited=2, failed=False)


def test_the_level_doubles_each_round_until_the_ceiling() -> None:
    ceiling = 3 * INITIAL_LEVEL
    policy, level = Aimd(ceiling=ceiling), INITIAL_LEVEL
    for _ in range(level):  # one round: as many good outcomes as the level
        level = policy.next_level(level, _fine(1), admitted=1)
    assert level == 2 * INITIAL_LEVEL
    for _ in range(2 * level):
        level = policy.next_level(level, _fine(1), admitted=1)
    assert level == ceiling


def test_a_429_cuts_once_per_round_then_growth_is_one_per_round() -> None:
    policy = Aimd(ceiling=256)
    level = policy.next_level(64, _limited(admitted=10), admitted=70)
    assert level == int(64 * DECREASE)
    # Rollouts let in before that cut report their 429s too: already answered, no second cut.
    assert policy.next_level(level, _limited(admitted=69), admitted=75) == level
    # A rollout let in after the cut that meets a 429 cuts again.
    assert policy.next_level(level, _limited(admitted=71), admitted=80) == int(level * DECREASE)
    level = int(level * DECREASE)
    grown = level
    for _ in range(level):  # a round after a cut: +1, not doubling
        grown = policy.next_level(grown, _fine(90), admitted=90)
    assert grown == level + 1


def test_failures_neither_grow_nor_cut() -> None:
    failed = Outcome(admitted=1, latency_s=1.0, rate_limited=0, failed=True)
    assert Aimd(ceiling=64).next_level(16, failed, admitted=1) == 16


def test_the_gate_never_lets_more_than_the_level_in_and_follows_a_cut() -> None:
    async def main() -> tuple[int, int]:
        limit = AdaptiveLimit(ceiling=8, initial=4)
        peak = 0
        release_first = asyncio.Event()

        async def holder(index: int) -> None:
            nonlocal peak
            admitted = await limit.acquire()
            peak = max(peak, limit.in_flight)
            if index == 0:
                await release_first.wait()
                limit.release(_limited(admitted))  # cuts 4 -> 2 (int(4 * 0.7))
                return
            await asyncio.sleep(0.01)
            limit.release(_fine(admitted))

        tasks = [asyncio.create_task(holder(i)) for i in range(12)]
        await asyncio.sleep(0.05)
        assert limit.in_flight <= 4
        release_first.set()
        await asyncio.gather(*tasks)
        return peak, limit.in_flight

    peak, in_flight = asyncio.run(main())
    assert peak <= 8 and in_flight == 0


def test_a_waiter_cancelled_after_it_was_given_a_place_passes_it_on() -> None:
    async def main() -> int:
        limit = AdaptiveLimit(ceiling=1, policy=Fixed(), initial=1)
        await limit.acquire()
        waiter = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0)
        limit.release(None)  # the place goes to the waiter ...
        waiter.cancel()  # ... which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await waiter
        third = await asyncio.wait_for(limit.acquire(), timeout=5)  # the place was passed on, not lost
        assert third
        return limit.in_flight

    assert asyncio.run(main()) == 1


def test_listeners_hear_every_change() -> None:
    changes: list[tuple[int, int]] = []
    limit = AdaptiveLimit(ceiling=64, initial=16)
    limit.listeners.append(lambda old, new, outcome: changes.append((old, new)))

    async def main() -> None:
        admitted = await limit.acquire()
        limit.release(_limited(admitted))

    asyncio.run(main())
    assert changes == [(16, int(16 * DECREASE))]


def test_the_throughput_policy_held_by_a_429_before_its_first_measurement_measures_on() -> None:
    """A hosted endpoint's 429 can come before the throughput policy measured any round: it holds the cut level and
    takes its next round as that level's throughput (the collector crashed here once)."""
    now = [0.0]
    policy = ThroughputKnee(ceiling=64, clock=lambda: now[0])
    level = policy.next_level(16, _limited(admitted=1), admitted=16)
    assert level == int(16 * DECREASE) and policy.mode == "hold"
    admitted = 16
    for _ in range(4 * MIN_WINDOW):  # rounds at the held level: half a round to settle, then whole rounds
        admitted += 1
        now[0] += 0.1
        level = policy.next_level(level, _fine(admitted), admitted=admitted)
    assert policy.points and policy.best is not None and policy.best.level == int(16 * DECREASE)
