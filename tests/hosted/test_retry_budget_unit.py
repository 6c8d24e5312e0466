"""The run-wide retry budget: retries stay within their share of first attempts; a run that mostly fails pauses
once and then stops with one message; a healthy window after a pause re-arms the pause; it never loops. Refusals of
a model endpoint (a spent quota) in a row stop it at once, quoting the endpoint."""

import asyncio

import pytest

from nemo_gym.errors import RetryLaterError
from nemo_gym.failures import EndpointRefusal
from nemo_gym.rollout_collection.retry_budget import (
    FREE_RETRIES,
    MIN_ATTEMPTS,
    REFUSALS_TO_STOP,
    WINDOW,
    EndpointRefused,
    RetryBudget,
    RunStopped,
)

QUOTA = EndpointRefusal("https://api.example.com/v1", 429, "insufficient_quota", "You exceeded your current quota.",
                        3600.0, 120.0)


def _budget(said: list[str], pause_s: float = 0.05) -> RetryBudget:
    return RetryBudget(max_failure_rate=0.5, pause_s=pause_s, retry_ratio=0.2, say=said.append)


async def _attempts(budget: RetryBudget, outcomes: list[str | None]) -> None:
    for failure_class in outcomes:
        epoch = await budget.admit(retry=False)
        assert epoch is not None
        budget.record(epoch, failure_class, "HTTP 503 from the model")


def test_retries_are_a_share_of_first_attempts() -> None:
    async def main() -> tuple[int, int]:
        budget = _budget([])
        await _attempts(budget, [None] * 100)  # 100 first attempts, all fine: 20 + FREE_RETRIES retries allowed
        allowed = 0
        while await budget.admit(retry=True) is not None:
            allowed += 1
        return allowed, budget.refused_retries

    allowed, refused = asyncio.run(main())
    assert allowed == 20 + FREE_RETRIES and refused == 1


def test_a_failing_run_pauses_once_then_stops_with_one_message() -> None:
    said: list[str] = []

    async def main() -> RunStopped:
        budget = _budget(said)
        await _attempts(budget, ["http_5xx"] * MIN_ATTEMPTS)  # trips: pause
        # The pause was set (whether its 0.05 s are still running depends on the machine's load, so not asserted).
        assert budget.paused_until > 0 and len(said) == 1
        await _attempts(budget, ["http_5xx"] * MIN_ATTEMPTS)  # admitted after the pause, failing as much: stop
        with pytest.raises(RunStopped) as stopped:
            await budget.admit(retry=False)
        return stopped.value

    stopped = asyncio.run(main())
    assert said[0].startswith(f"pausing 0.05 s: {MIN_ATTEMPTS} of the last {MIN_ATTEMPTS} rollout attempts failed "
                              f"(http_5xx: {MIN_ATTEMPTS}); last error: HTTP 503 from the model")
    assert str(stopped).startswith("stopped: ") and "after a 0.05 s pause" in str(stopped)
    assert "\n" not in str(stopped)


def test_attempts_begun_before_the_pause_do_not_count_after_it() -> None:
    async def main() -> bool:
        budget = _budget([])
        old_epochs = [await budget.admit(retry=False) for _ in range(30)]  # 30 in flight
        for epoch in old_epochs[:MIN_ATTEMPTS]:
            assert epoch is not None
            budget.record(epoch, "connect")  # the pause comes here
        for epoch in old_epochs[MIN_ATTEMPTS:]:
            assert epoch is not None
            budget.record(epoch, "connect")  # begun before the pause: not counted, so no stop
        await _attempts(budget, [None] * MIN_ATTEMPTS)
        return await budget.admit(retry=False) is not None

    assert asyncio.run(main())


def test_a_healthy_window_after_a_pause_makes_the_next_trip_a_pause_again() -> None:
    said: list[str] = []

    async def main() -> None:
        budget = _budget(said)
        await _attempts(budget, ["timeout"] * MIN_ATTEMPTS)
        await _attempts(budget, [None] * WINDOW)  # a whole healthy window: re-armed
        for _ in range(WINDOW):  # fail until the next trip (the second line said), whatever the clock does
            if len(said) == 2:
                break
            await _attempts(budget, ["timeout"])
        assert await budget.admit(retry=False) is not None  # the trip was a pause, not a stop

    asyncio.run(main())
    assert len(said) == 2 and all(line.startswith("pausing") for line in said)


def test_a_failure_rate_below_the_threshold_never_pauses() -> None:
    said: list[str] = []
    asyncio.run(_attempts(_budget(said), (["http_5xx", None, None] * 200)))
    assert said == []


def test_refusals_in_a_row_stop_the_run_at_once_quoting_the_endpoint() -> None:
    async def main() -> tuple[EndpointRefused, int]:
        budget = _budget([], pause_s=3600)
        epoch = await budget.admit(retry=False)
        assert epoch is not None
        for _ in range(REFUSALS_TO_STOP - 1):  # a refusal among answers does not stop the run
            budget.record(epoch, "rate_limited", QUOTA.line(), QUOTA)
        budget.record(epoch, None)
        for _ in range(REFUSALS_TO_STOP - 1):
            budget.record(epoch, "rate_limited", QUOTA.line(), QUOTA)
        await budget.admit(retry=False)
        budget.record(epoch, "rate_limited", QUOTA.line(), QUOTA)
        with pytest.raises(EndpointRefused) as stopped:
            await budget.admit(retry=False)  # no pause first: the endpoint said it will not serve within one
        return stopped.value, budget.first_attempts

    stopped, first_attempts = asyncio.run(main())
    assert isinstance(stopped, RunStopped) and isinstance(stopped, RetryLaterError)  # exit status 75
    assert str(stopped) == (
        "stopped: model endpoint https://api.example.com/v1 answered 429 insufficient_quota: You exceeded your current "
        f"quota; the endpoint asks to wait 3600 s, longer than its model server waits (max_rate_limit_wait_s=120), "
        f"to {REFUSALS_TO_STOP} rollout attempts in a row; resume once it serves again")
    assert first_attempts == 2
