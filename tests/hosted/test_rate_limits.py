"""The endpoint limiter: configured budgets are never exceeded (in one process or across forked workers sharing
it), a 429's Retry-After pauses every sender and voids earlier reservations, and without a configured limit a 429
sets a learned rate. Every check is an upper bound on how fast requests went out, which other load on the machine
can only make slower, so no verdict depends on timing luck. A request whose turn would come after its deadline is
refused at once and reserves nothing; a 429 beyond what the server waits (`refused`) is counted and pauses nobody."""

import asyncio
import multiprocessing
import os
import time

import pytest

from nemo_gym.responses_api_models.rate_limits import (
    BURST_S,
    DEEP_CUT,
    Budgets,
    EndpointLimiter,
    PastDeadline,
    shared_limiter,
)


async def _send_times(limiter: EndpointLimiter, n: int, tokens: int = 0) -> list[float]:
    async def one() -> float:
        await limiter.acquire(tokens)
        return time.monotonic()

    return sorted(await asyncio.gather(*(one() for _ in range(n))))


def _most_in_any_window(times: list[float], window_s: float) -> int:
    return max(sum(1 for t in times[i:] if t - start <= window_s) for i, start in enumerate(times))


def _within_rate(times: list[float], per_s: float) -> bool:
    """No window held more sends than the rate (plus the burst and one) allows."""
    return all(_most_in_any_window(times, w) <= per_s * (w + BURST_S) + 1 for w in (0.25, 0.5, 1.0, 2.0))


def test_requests_per_minute_are_never_exceeded() -> None:
    times = asyncio.run(_send_times(EndpointLimiter(Budgets(requests_per_minute=600)), 26))
    assert times[-1] - times[0] >= (26 - 1 - 10 * BURST_S) / 10 - 0.01
    assert _within_rate(times, 10.0)


def test_tokens_per_minute_are_never_exceeded() -> None:
    times = asyncio.run(_send_times(EndpointLimiter(Budgets(tokens_per_minute=6000)), 8, tokens=50))  # 2/s
    assert times[-1] - times[0] >= (8 - 1 - 2 * BURST_S) / 2 - 0.01
    assert _within_rate(times, 2.0)


def _child_sends(limiter: EndpointLimiter, n: int, out: "multiprocessing.connection.Connection") -> None:
    out.send(asyncio.run(_send_times(limiter, n)))
    out.close()


def test_forked_workers_share_one_budget() -> None:
    """What a model server's worker processes do: each has the limiter its launcher made before forking."""
    limiter = shared_limiter(f"test-{os.getpid()}", Budgets(requests_per_minute=600))
    receiver, sender = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_child_sends, args=(limiter, 15, sender))
    child.start()
    ours = asyncio.run(_send_times(limiter, 15))
    theirs = receiver.recv()
    child.join(timeout=60)
    together = sorted(ours + theirs)
    assert child.exitcode == 0
    # Split per worker, each would send at 10/s and the two together at 20/s: 30 sends in about 1 s.
    assert together[-1] - together[0] >= (30 - 1 - 10 * BURST_S) / 10 - 0.01
    assert _within_rate(together, 10.0)


def test_a_429_pauses_everyone_and_voids_the_reservations_made_before_it() -> None:
    async def main() -> tuple[float, list[float]]:
        limiter = EndpointLimiter(Budgets(requests_per_minute=600))
        waiting = [asyncio.create_task(_send_times(limiter, 1)) for _ in range(10)]  # reserved over ~0.5 s
        await asyncio.sleep(0)
        limited_at = time.monotonic()
        limiter.limited(retry_after_s=0.3)
        sent = sorted(t for times in await asyncio.gather(*waiting) for t in times)
        return limited_at, sent

    limited_at, sent = asyncio.run(main())
    assert sent[0] >= limited_at + 0.3  # nobody sent during the pause
    # After it they went out one by one at the budget's pace, not all together when the pause ended.
    assert _within_rate(sent, 10.0) and sent[-1] - sent[0] >= (10 - 1 - 10 * BURST_S) / 10 - 0.01


def test_without_a_limit_a_429_before_any_answer_sets_one_request_per_retry_after() -> None:
    async def main() -> tuple[float | None, float, list[float]]:
        limiter = EndpointLimiter(Budgets())
        limiter.limited(retry_after_s=0.2)
        learned = limiter.learned_requests_per_minute()
        return learned, time.monotonic(), await _send_times(limiter, 6)

    learned, asked_at, sent = asyncio.run(main())
    assert learned == 300.0  # one request per 0.2 s
    # A learned rate gets no burst: the k-th send is at least k intervals after the sends were asked for (bar
    # rounding). A loaded machine can only make a send later than its slot, never earlier.
    assert all(at >= asked_at + k * 0.2 - 0.01 for k, at in enumerate(sent))


def test_the_learned_rate_grows_back_only_while_answers_come() -> None:
    limiter = EndpointLimiter(Budgets())
    limiter.limited(retry_after_s=0.05)
    first = limiter.learned_requests_per_minute()
    asyncio.run(_send_times(limiter, 5))  # sent, never answered: nothing shows the endpoint takes more
    assert limiter.learned_requests_per_minute() == first
    for _ in range(30):  # 1.5 s of answers: past the second after a cut in which the rate does not grow
        limiter.answered(0)
        asyncio.run(_send_times(limiter, 1))
    grown = limiter.learned_requests_per_minute()
    assert first is not None and grown is not None and grown > first


def _past_the_cut_guard(limiter: EndpointLimiter) -> None:
    """Wait until the limiter lets its learned rate change again (the guard after a cut is over)."""
    while time.monotonic() < limiter._state.read().cut_guard_until:
        time.sleep(0.05)


def test_growth_never_lowers_the_learned_rate_while_answers_lag_the_sends() -> None:
    """At the start the answered rate is far below the learned one (answers come a latency after their sends): the
    headroom it sets stops growth, but must not cut the rate to it (that held runs at a fraction of the limit)."""
    limiter = EndpointLimiter(Budgets())
    limiter.limited(retry_after_s=0.01)  # 100 requests/s
    limiter.answered(0)  # one answer: an answered rate of about one a second
    learned = limiter.learned_requests_per_minute()
    _past_the_cut_guard(limiter)
    asyncio.run(_send_times(limiter, 1))  # a reservation lets the rate grow
    assert learned == 6000.0 and limiter.learned_requests_per_minute() == learned


def test_a_429_remembers_the_rate_that_met_it_not_the_answered_rate() -> None:
    """The remembered limit (what the rate grows back to quickly) is the rate the limiter was sending at; the answered
    rate, lagging behind, would keep the run far below the endpoint's limit."""
    limiter = EndpointLimiter(Budgets())
    limiter.limited(retry_after_s=0.01)  # 100 requests/s
    limiter.answered(0)
    _past_the_cut_guard(limiter)
    limiter.limited(retry_after_s=0.01)  # met at 100/s, with an answered rate of about one a second
    assert limiter._state.read().limited_rate == 100.0
    assert limiter.learned_requests_per_minute() == 60 * 100.0 * DEEP_CUT  # the cut of 100/s, a second after the last


def test_a_turn_after_the_deadline_is_refused_at_once_and_reserves_nothing() -> None:
    async def main() -> tuple[float, float, float]:
        limiter = EndpointLimiter(Budgets(requests_per_minute=60))  # one a second, half a second's burst
        await limiter.acquire()
        reserved = limiter._state.read().requests_at
        with pytest.raises(PastDeadline) as late:  # the next turn is half a second away
            await limiter.acquire(deadline=time.monotonic() + 0.1)
        return reserved, limiter._state.read().requests_at, late.value.wait_s

    reserved, after, wait_s = asyncio.run(main())
    assert after == reserved  # the next request's turn is not pushed back by one that was never sent
    assert 0.1 < wait_s <= 0.5


def test_a_429_that_moves_a_waiting_turn_past_its_deadline_refuses_it() -> None:
    async def main() -> None:
        limiter = EndpointLimiter(Budgets(requests_per_minute=60))
        await limiter.acquire()
        waiting = asyncio.create_task(limiter.acquire(deadline=time.monotonic() + 2.0))  # its turn: in 0.5 s
        await asyncio.sleep(0)
        limiter.limited(retry_after_s=5.0)
        with pytest.raises(PastDeadline):
            await waiting

    asyncio.run(main())


def test_a_refusal_is_counted_and_pauses_nobody() -> None:
    limiter = EndpointLimiter(Budgets())
    limiter.refused()
    limiter.limited(retry_after_s=0.01)
    state = limiter._state.read()
    assert limiter.rate_limited_count() == 2 and state.paused_until < time.monotonic() + 0.02
    assert limiter.learned_requests_per_minute() == 6000.0  # set by the 429 it waited out, not by the refusal


class _CountingLock:
    """The limiter's shared lock, counted: how often a request's path takes it."""

    def __init__(self, lock: object) -> None:
        self.lock, self.taken = lock, 0

    def __enter__(self) -> None:
        self.taken += 1
        self.lock.__enter__()  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)  # type: ignore[attr-defined]


def test_without_a_limit_or_a_429_a_request_takes_no_lock_and_reserves_nothing() -> None:
    async def main() -> tuple[int, int]:
        limiter = EndpointLimiter(Budgets())
        counting = _CountingLock(limiter._state._lock)
        limiter._state._lock = counting  # type: ignore[assignment]
        waited = [await limiter.acquire(100) for _ in range(50)]
        assert waited == [0.0] * 50
        unpaced = counting.taken
        limiter.limited(retry_after_s=0.05)  # from the first 429 on, there is a rate to keep
        await limiter.acquire()
        return unpaced, counting.taken

    unpaced, after_a_429 = asyncio.run(main())
    assert unpaced == 0
    assert after_a_429 >= 3  # the 429 itself, then the reservation and the send of the next request
