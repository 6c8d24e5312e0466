"""The run-wide retry budget: a failing endpoint costs a bounded amount of extra load, and a run that mostly fails
pauses once and then stops, with one clear message; it never loops.

Three rules, over every rollout attempt of one ng_collect_rollouts run:
- Retries are at most `retry_ratio` of the first attempts so far, plus `FREE_RETRIES`. Beyond that a failed
  rollout is recorded without another attempt (a resume runs it again).
- When more than `max_failure_rate` of the last `WINDOW` attempts failed (`MIN_ATTEMPTS` at least), no new attempt
  starts for `pause_s`. After the pause the window starts afresh, counting only attempts begun after it; if those
  fail as much again, the run stops (`RunStopped`). A whole window of attempts below the rate after a pause makes
  the next trip a pause again: a transient outage costs a pause, a lasting one stops the run.
- When `REFUSALS_TO_STOP` attempts in a row failed on a model endpoint's refusal (a 429 asking for a longer wait than
  its model server takes, `max_rate_limit_wait_s`: a spent quota as a rule; nemo_gym.failures.EndpointRefusal), the
  run stops at once (`EndpointRefused`, exit status 75), quoting the endpoint: no pause, as the endpoint said it
  will not serve within one. Any other outcome between them starts the count again, so a stray refusal among
  answers does not stop a run.
"""

import asyncio
import time
from collections import Counter, deque
from typing import Callable

from nemo_gym.errors import DownstreamError, RetryLaterError
from nemo_gym.failures import EndpointRefusal

WINDOW = 100
MIN_ATTEMPTS = 20
FREE_RETRIES = 10
REFUSALS_TO_STOP = 3


class RunStopped(DownstreamError):
    """Too many attempts failed, again after a pause: the run stops (finished rollouts are kept)."""


class EndpointRefused(RunStopped, RetryLaterError):
    """A model endpoint refuses every request for longer than its model server waits: the run stops, and the same
    command resumes it once the endpoint serves again."""

    def __init__(self, refusal: EndpointRefusal, attempts: int) -> None:
        super().__init__(f"stopped: {refusal.line()}, to {attempts} rollout attempts in a row; resume once it "
                         f"serves again")
        self.refusal = refusal


class RetryBudget:
    """Shared by every rollout of a run: `admit` before each attempt, `record` after it."""

    def __init__(self, *, max_failure_rate: float, pause_s: float, retry_ratio: float,
                 say: Callable[[str], None] = print) -> None:
        self.max_failure_rate = max_failure_rate
        self.pause_s = pause_s
        self.retry_ratio = retry_ratio
        self.say = say
        self.first_attempts = 0
        self.retries = 0
        self.refused_retries = 0  # failed rollouts not retried because the budget was spent
        self.paused_until = 0.0
        self._window: deque[str | None] = deque(maxlen=WINDOW)  # per attempt: its failure class, None when fine
        self._armed = True  # the next trip pauses (False: it stops the run)
        self._epoch = 0  # attempts begun before the latest pause belong to an older epoch and are not counted
        self._refused_in_a_row = 0  # attempts that just finished on an endpoint's refusal, with nothing between
        self._stopped: RunStopped | None = None

    @property
    def paused(self) -> bool:
        return time.monotonic() < self.paused_until

    async def admit(self, retry: bool) -> int | None:
        """Before an attempt: wait out a pause, raise `RunStopped` once the run must stop. A retry the budget has no
        room for returns None (record the rollout as failed); otherwise the epoch to `record` the attempt under."""
        while True:
            self.raise_if_stopped()
            wait = self.paused_until - time.monotonic()
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        if retry:
            if self.retries >= self.retry_ratio * self.first_attempts + FREE_RETRIES:
                self.refused_retries += 1
                return None
            self.retries += 1
        else:
            self.first_attempts += 1
        return self._epoch

    def raise_if_stopped(self) -> None:
        if self._stopped is not None:
            raise self._stopped

    def record(self, epoch: int, failure_class: str | None, error: str = "",
               refusal: EndpointRefusal | None = None) -> None:
        """After an attempt admitted in `epoch`: its failure class (None when it succeeded), error text, and the
        endpoint's refusal it failed on, if it did."""
        if self._stopped is not None:
            return
        self._refused_in_a_row = self._refused_in_a_row + 1 if refusal is not None else 0
        if refusal is not None and self._refused_in_a_row >= REFUSALS_TO_STOP:
            self._stopped = EndpointRefused(refusal, self._refused_in_a_row)
            return
        if epoch != self._epoch:
            return
        self._window.append(failure_class)
        failed = sum(1 for entry in self._window if entry is not None)
        if len(self._window) < MIN_ATTEMPTS:
            return
        if failed <= self.max_failure_rate * len(self._window):
            if len(self._window) == WINDOW:
                self._armed = True  # a whole healthy window: the next trip pauses again
            return
        classes = ", ".join(f"{name}: {n}" for name, n in sorted(Counter(e for e in self._window if e).items()))
        what = f"{failed} of the last {len(self._window)} rollout attempts failed ({classes}); last error: {error}"
        if self._armed:
            self._armed = False
            self._epoch += 1
            self._window.clear()
            self.paused_until = time.monotonic() + self.pause_s
            self.say(f"pausing {self.pause_s:g} s: {what}")
            return
        self._stopped = RunStopped(f"stopped: {what[:600]}; the same after a {self.pause_s:g} s pause, so the run "
                                   f"stops here (+max_failure_rate={self.max_failure_rate:g})")
