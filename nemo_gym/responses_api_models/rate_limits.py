"""Requests and tokens per minute towards one model endpoint, held across every worker process of its model server,
and a request rate learned from the endpoint's 429s where no limit is configured.

Each budget is kept as one "theoretical arrival time" (GCRA, the leaky bucket as a timestamp): a request reserves
its send time in one short locked step and then sleeps until it, so waiting costs no polling and requests go out in
the order they asked. A budget lets half a second of its rate go out at once (`BURST_S`) and otherwise spaces
requests evenly, so it never sends more than `rate * (window + 0.5 s) + 1` in any window: within what an endpoint
that enforces its per-minute limit over each second (as OpenAI says it may) lets through.

A 429 (`limited`) pauses every sender for its Retry-After and cuts a learned request rate to `CUT` times the rate it
was sending at (the learned rate, or at first the rate of answered requests over about `RATE_WINDOW_S` seconds), at
most once per `CUT_GUARD_S` (`DEEP_CUT` when the last cut did not end the 429s), never below `CUT` times the answered
rate; the rate it was sending at is remembered as the endpoint's limit (not the answered rate: answers lag the sends
by a latency and stop during a pause, so at the start or after a pause they understate what the endpoint took). A
429 before any answer has nothing to measure: its Retry-After (how soon one more request fits) gives the first rate,
one request per Retry-After. While no 429 comes, the learned rate grows quickly
(`FAST_GROWTH_PER_S`) up to `PLATEAU` of the remembered limit (without bound before one is known), then slowly
(`SLOW_GROWTH_PER_S`) to find out whether the endpoint now allows more; it grows no further than `HEADROOM` times the
answered rate, and growth never lowers it. Reservations of requests still waiting when a 429 comes are void (an
epoch counter): their holders reserve again, spaced at the new rate, instead of all sending when the pause ends,
while what was already sent stays counted
(the budgets keep a second time that counts only sent requests). The configured limits are never exceeded.

A request may bring a deadline (`acquire(deadline=...)`): when its turn would come after it, `acquire` raises
`PastDeadline` at once and reserves nothing, so it is never sent with next to no time left for its answer (sent,
billed, then timed out), and fails as rate-limited. A 429 whose wait is longer than the model server waits at all
(`refused`, a spent quota as a rule) pauses and cuts nothing: the wait is not taken, and the pacing must be as it was
when the endpoint serves again. Every 429, waited out or not, is counted (`rate_limited_count`, for the collector's
progress line: endpoint_calls.py).

The state lives in memory the server's worker processes share, behind a lock shared with them too
(nemo_gym.server.fork_shared): the limits hold for the server as a whole, not per worker.
"""

import asyncio
import math
import struct
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from nemo_gym.server.fork_shared import SharedPage, made_once

BURST_S = 0.5  # how much of a budget may go out at once: half a second of its rate
CUT = 0.85  # a 429 sets the learned rate to this share of the rate that met it
DEEP_CUT = 0.6  # ... or of this, when the previous cut was less than `STILL_OVER_S` ago and did not end the 429s
STILL_OVER_S = 3.0
CUT_GUARD_S = 1.0  # at most one cut in this long (the 429s of one overload arrive together)
PLATEAU = 0.95  # the learned rate grows back fast to this share of the rate that met the last 429
FAST_GROWTH_PER_S = 0.2  # relative growth per second below the plateau
SLOW_GROWTH_PER_S = 0.001  # ... above it: 6% a minute
HEADROOM = 1.2  # the learned rate stays within this factor of the answered rate
RATE_WINDOW_S = 10.0  # time constant of the answered-rate estimate
_MEASURED_AFTER_S = 1.0  # answers over less time than this do not measure a rate yet
_MIN_FIRST_INTERVAL_S = 0.01

T = TypeVar("T")


@dataclass
class _Fields:
    """The shared state, as one record of doubles (times are time.monotonic, the same clock in every process)."""

    requests_at: float = 0.0  # GCRA arrival time of the request budget, reservations of waiting requests included
    tokens_at: float = 0.0  # ... of the token budget
    requests_sent_at: float = 0.0  # the same counting only the requests sent: what a 429 goes back to
    tokens_sent_at: float = 0.0
    paused_until: float = 0.0  # nobody sends before this (Retry-After)
    epoch: float = 0.0  # bumped by every 429: reservations of an older epoch are void
    learned_interval: float = 0.0  # seconds between requests learned from 429s (0: none learned)
    cut_guard_until: float = 0.0  # no further cut before this; no growth either
    grown_at: float = 0.0  # when the learned rate last grew
    limited_rate: float = 0.0  # requests per second that met the last 429
    cut_at: float = 0.0  # when the learned rate was last cut
    answered_rate: float = 0.0  # exponentially weighted rate of answered requests
    answered_at: float = 0.0  # when it was last updated
    first_answer_at: float = 0.0  # for its start-up correction (an EWMA starts at 0)
    rate_limited: float = 0.0  # 429s the endpoint answered, waited out or not


_LAYOUT = struct.Struct(f"{len(_Fields.__dataclass_fields__)}d")
# The three answered-rate fields, next to each other: written without the lock where nothing is paced.
_ANSWERS = struct.Struct("3d")
_ANSWERS_AT = list(_Fields.__dataclass_fields__).index("answered_rate") * 8
assert list(_Fields.__dataclass_fields__)[_ANSWERS_AT // 8:_ANSWERS_AT // 8 + 3] == [
    "answered_rate", "answered_at", "first_answer_at"]


@dataclass(frozen=True)
class Budgets:
    """The limits of one endpoint; None means no limit."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


class PastDeadline(Exception):
    """A request's turn under the limits (or a 429's pause) would come after its deadline: it is not sent."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"its turn would come in {wait_s:.1f} s, after its deadline")
        self.wait_s = wait_s  # from now until its turn


class _SharedState:
    """`_Fields` in memory shared with forked children, behind a lock shared with them too."""

    def __init__(self) -> None:
        shared = SharedPage(_LAYOUT.size)
        self._page, self._lock = shared.memory, shared.lock
        _LAYOUT.pack_into(self._page, 0, *vars(_Fields()).values())

    def update(self, change: Callable[[_Fields], T]) -> T:
        """Run `change` on the fields under the lock (a few arithmetic steps, never an await); its result."""
        with self._lock:
            fields = _Fields(*_LAYOUT.unpack_from(self._page, 0))
            result = change(fields)
            _LAYOUT.pack_into(self._page, 0, *vars(fields).values())
        return result

    def read(self) -> _Fields:
        return _Fields(*_LAYOUT.unpack_from(self._page, 0))

    def count_answer(self, now: float) -> None:
        """One more answer in the answered rate, without the lock: two workers answering in the same instant may
        count one, which an estimate over `RATE_WINDOW_S` does not notice, and a request pays no lock for it."""
        rate, at, first = _ANSWERS.unpack_from(self._page, _ANSWERS_AT)
        _ANSWERS.pack_into(self._page, _ANSWERS_AT, *_counted(rate, at, first, now))


def _counted(rate: float, at: float, first: float, now: float) -> tuple[float, float, float]:
    """(answered_rate, answered_at, first_answer_at) with one more answer at `now`."""
    decay = math.exp(-(now - at) / RATE_WINDOW_S) if at else 0.0
    return rate * decay + 1.0 / RATE_WINDOW_S, now, first or now


def _grow(f: _Fields, now: float) -> None:
    """Let the learned rate grow while no 429 came: fast up to the plateau, slowly above it, no further than HEADROOM
    times the answered rate (which stops growth but never lowers the rate)."""
    if not f.learned_interval or now < f.cut_guard_until:
        return
    answered = _answered_rate(f, now)
    if answered:
        rate, elapsed = 1.0 / f.learned_interval, now - max(f.grown_at, f.cut_guard_until)
        plateau = PLATEAU * f.limited_rate if f.limited_rate else math.inf
        if rate < plateau:
            rate = min(plateau, rate * math.exp(FAST_GROWTH_PER_S * elapsed))
        else:
            rate *= math.exp(SLOW_GROWTH_PER_S * elapsed)
        # Answers lag the sends by a latency: at the start or after a pause they understate what the endpoint takes.
        f.learned_interval = min(f.learned_interval, 1.0 / min(rate, HEADROOM * answered))
    f.grown_at = now


def _answered_rate(fields: _Fields, now: float) -> float:
    """The answered-request rate now, corrected for how little time the estimate has had since the first answer."""
    if not fields.first_answer_at:
        return 0.0
    decayed = fields.answered_rate * math.exp(-(now - fields.answered_at) / RATE_WINDOW_S)
    settled = 1.0 - math.exp(-max(now - fields.first_answer_at, 1e-3) / RATE_WINDOW_S)
    return decayed / settled


class EndpointLimiter:
    """Paces the requests of one model server to its endpoint; see the module docstring."""

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets
        self._state = _SharedState()
        rpm, tpm = budgets.requests_per_minute, budgets.tokens_per_minute
        self._request_interval = 60.0 / rpm if rpm else 0.0
        self._token_interval = 60.0 / tpm if tpm else 0.0

    @property
    def counts_tokens(self) -> bool:
        return self._token_interval > 0

    def learned_requests_per_minute(self) -> float | None:
        """The rate learned from 429s, if any."""
        interval = self._state.read().learned_interval
        return 60.0 / interval if interval else None

    def _reserve(self, tokens: int, now: float, deadline: float | None) -> tuple[float, float]:
        """(epoch, the time this request may be sent at); its share of each budget is taken now. `PastDeadline`,
        with nothing taken, when that time is after `deadline`."""

        def change(f: _Fields) -> tuple[float, float]:
            _grow(f, now)
            at = max(now, f.paused_until)
            interval = max(self._request_interval, f.learned_interval)
            if interval:  # a learned rate alone gets no burst: it is what the endpoint just refused
                at = max(at, f.requests_at - (BURST_S if self._request_interval else 0.0))
            requests_at = at
            if self._token_interval:
                at = max(at, f.tokens_at - BURST_S)
            if deadline is not None and at > deadline:
                return f.epoch, at
            if interval:
                f.requests_at = max(f.requests_at, requests_at) + interval
            if self._token_interval:
                f.tokens_at = max(f.tokens_at, at) + tokens * self._token_interval
            return f.epoch, at

        epoch, at = self._state.update(change)
        if deadline is not None and at > deadline:
            raise PastDeadline(at - now)
        return epoch, at

    def _send(self, epoch: float, tokens: int) -> bool:
        """Count a request as sent now, unless a 429 voided its reservation meanwhile (False: reserve again)."""
        now = time.monotonic()

        def change(f: _Fields) -> bool:
            if f.epoch != epoch:
                return False
            interval = max(self._request_interval, f.learned_interval)
            if interval:
                f.requests_sent_at = max(f.requests_sent_at, now) + interval
            if self._token_interval:
                f.tokens_sent_at = max(f.tokens_sent_at, now) + tokens * self._token_interval
            return True

        return self._state.update(change)

    async def acquire(self, tokens: int = 0, deadline: float | None = None) -> float:
        """Wait until one request of about `tokens` tokens may be sent; the seconds waited. `PastDeadline` (at once,
        or when a 429 meanwhile moves its turn) when it could not be sent by `deadline` (time.monotonic)."""
        started = time.monotonic()
        if not (self._request_interval or self._token_interval):
            state = self._state.read()  # without the lock: a request let through in a 429's instant is one more 429
            if not state.learned_interval and state.paused_until <= started:
                return 0.0  # nothing to pace (no budget, none learned, no pause): no lock, no reservation
        epoch, send_at = self._reserve(tokens, started, deadline)
        while True:
            state = self._state.read()
            if state.epoch != epoch:  # a 429 since: the reservation is void, reserve again at the new rate
                epoch, send_at = self._reserve(tokens, time.monotonic(), deadline)
                continue
            now = time.monotonic()
            delay = max(send_at, state.paused_until) - now
            if deadline is not None and now > deadline:  # woken late (a loaded event loop): not sent after all
                raise PastDeadline(0.0)
            if delay <= 0:
                if self._send(epoch, tokens):
                    return time.monotonic() - started
                continue  # a 429 came in between: reserve again
            await asyncio.sleep(min(delay, BURST_S))  # wakes at least every second to see a 429's new epoch

    def answered(self, extra_tokens: int) -> None:
        """An answer came (counted for the answered rate); `extra_tokens`: how many more tokens the endpoint reported
        than the request was charged for, taken from the token budget too."""
        now = time.monotonic()
        if not self._token_interval:  # nothing else to charge: no lock per answer
            self._state.count_answer(now)
            return

        def change(f: _Fields) -> float:
            f.answered_rate, f.answered_at, f.first_answer_at = _counted(f.answered_rate, f.answered_at,
                                                                         f.first_answer_at, now)
            if extra_tokens > 0:
                f.tokens_at = max(f.tokens_at, now) + extra_tokens * self._token_interval
                f.tokens_sent_at = max(f.tokens_sent_at, now) + extra_tokens * self._token_interval
            return 0.0

        self._state.update(change)

    def limited(self, retry_after_s: float) -> None:
        """The endpoint answered 429: pause everyone for `retry_after_s`, void the reservations, and cut the learned
        rate (once per overload)."""
        now = time.monotonic()

        def change(f: _Fields) -> float:
            f.rate_limited += 1
            f.paused_until = max(f.paused_until, now + retry_after_s)
            f.epoch += 1
            # Every waiting holder reserves again, from the pause's end; what was sent stays counted.
            f.requests_at = max(f.requests_sent_at, f.paused_until)
            f.tokens_at = max(f.tokens_sent_at, f.paused_until)
            if now >= f.cut_guard_until:
                measured = f.first_answer_at and now - f.first_answer_at >= _MEASURED_AFTER_S
                answered = _answered_rate(f, now) if measured else 0.0
                if f.learned_interval or answered:
                    sending = 1.0 / f.learned_interval if f.learned_interval else answered
                    rate = (DEEP_CUT if now - f.cut_at < STILL_OVER_S else CUT) * sending
                    # Never below a cut of what the endpoint took of late: 429s that persist for another reason
                    # (a token count estimated short) must not drive the rate to nothing.
                    f.learned_interval = 1.0 / max(rate, CUT * answered)
                    f.limited_rate = sending
                else:  # nothing answered to measure yet: one request per Retry-After, growing from there
                    f.learned_interval = max(retry_after_s, _MIN_FIRST_INTERVAL_S)
                f.cut_at = now
                f.cut_guard_until = now + max(CUT_GUARD_S, retry_after_s)
            return 0.0

        self._state.update(change)

    def refused(self) -> None:
        """The endpoint answered 429 asking for a longer wait than the model server takes: counted, nothing more."""

        def change(f: _Fields) -> float:
            f.rate_limited += 1
            return 0.0

        self._state.update(change)

    def rate_limited_count(self) -> int:
        """429s the endpoint answered this server, all its workers together, since it started."""
        return int(self._state.read().rate_limited)


def shared_limiter(server: str, budgets: Budgets) -> EndpointLimiter:
    """The limiter of model server `server`: made once per process tree, so the server's worker processes share
    one."""
    return made_once(("rate limits", server, budgets), lambda: EndpointLimiter(budgets))
