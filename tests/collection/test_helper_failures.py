"""run_examples applies ng_collect_rollouts' failure rules: bounded retries, timeouts, failure classes, no fake
results; a failure raises RolloutFailedError, or is yielded with return_failures=True."""

import asyncio
from typing import Any

import pytest

from nemo_gym.errors import InputDataError, NemoGymError, RolloutFailedError
from nemo_gym.rollout_collection import RolloutCollectionHelper, RolloutFailure
from nemo_gym.sync_bridge import run_sync
from tests.collection.conftest import CollectionStack
from tests.collection.helper_util import rows, stats


def _helper(stack: CollectionStack, **policy: Any) -> RolloutCollectionHelper:
    return RolloutCollectionHelper(stack.stack.head_url, retry_backoff_s=0.01, **policy)


async def _all(helper: RolloutCollectionHelper, sent: list[dict], **kwargs: Any) -> list[tuple[dict, Any]]:
    return [item async for item in helper.run_examples(sent, num_samples_in_parallel=4, **kwargs)]


def test_retryable_failure_is_retried_to_the_limit_then_raises(collection_stack: CollectionStack) -> None:
    stats(collection_stack, "always_500", reset=True)
    with pytest.raises(RolloutFailedError) as info:
        run_sync(_all(_helper(collection_stack, max_attempts=3), rows("always_500", 1, start=7)))
    error = info.value
    assert (error.failure_class, error.attempts, error.http_status) == ("http_5xx", 3, 500)
    assert (error.task_index, error.rollout_index) == (7, 0) and "injected fault" in error.last_error
    assert "rollout of task 7, rollout 0 failed after 3 attempt(s)" in str(error)
    assert stats(collection_stack, "always_500")["runs"] == 3


def test_return_failures_yields_every_row_with_its_outcome(collection_stack: CollectionStack) -> None:
    collection_stack.marker("flaky_downstream").touch()
    collection_stack.marker("bad_request").touch()
    try:
        downstream = rows("flaky_downstream", 10)  # the agent's 502 names a model-server timeout: retried
        bad = rows("bad_request", 10, start=10)  # a downstream 4xx relayed as 502: never retried
        results = run_sync(_all(_helper(collection_stack, max_attempts=2), downstream + bad, return_failures=True))
    finally:
        collection_stack.marker("flaky_downstream").unlink()
        collection_stack.marker("bad_request").unlink()
    assert sorted(row["_ng_task_index"] for row, _ in results) == list(range(20))
    failures = {row["_ng_task_index"]: out for row, out in results if isinstance(out, RolloutFailure)}
    faulty = [t for t in range(20) if (t * 7) % 100 < 30]  # the fault agent's choice at fault_fraction 0.3
    assert faulty == [0, 1, 2, 3, 4, 15, 16, 17, 18]
    assert {t: (f.failure_class, f.attempts) for t, f in failures.items()} == {
        t: ("timeout", 2) if t < 10 else ("http_4xx", 1) for t in faulty}
    for row, out in results:
        if not isinstance(out, RolloutFailure):
            assert out["reward"] == float(row["_ng_task_index"] % 2)


def test_a_rollout_over_its_deadline_fails_as_timeout(collection_stack: CollectionStack) -> None:
    collection_stack.marker("flaky_hang").touch()
    try:
        helper = _helper(collection_stack, max_attempts=2, rollout_timeout_s=0.3)
        results = run_sync(_all(helper, rows("flaky_hang", 4), return_failures=True))
        with pytest.raises(RolloutFailedError, match=r"\(timeout\): rollout exceeded rollout_timeout_s=0.3"):
            run_sync(_all(helper, rows("flaky_hang", 1)))
    finally:
        collection_stack.marker("flaky_hang").unlink()
    outcomes = {row["_ng_task_index"]: out for row, out in results}
    for task in (0, 1, 2):  # (7 * task) % 100 < 20: these hang for 5 s
        assert (outcomes[task].failure_class, outcomes[task].attempts) == ("timeout", 2)
    assert outcomes[3]["reward"] == 1.0


def test_a_reply_without_reward_is_a_failure_not_a_result(collection_stack: CollectionStack) -> None:
    collection_stack.marker("invalid_reply").touch()
    try:
        with pytest.raises(RolloutFailedError) as info:
            run_sync(_all(_helper(collection_stack), rows("invalid_reply", 1)))
    finally:
        collection_stack.marker("invalid_reply").unlink()
    assert (info.value.failure_class, info.value.attempts) == ("invalid_response", 1)


def test_rows_that_cannot_run_raise_typed_errors(collection_stack: CollectionStack) -> None:
    helper = _helper(collection_stack)
    no_agent = rows("agent_a", 3)
    del no_agent[1]["agent_ref"]
    with pytest.raises(InputDataError, match='row 1 of run_examples has no agent_ref'):
        run_sync(_all(helper, no_agent))
    with pytest.raises(NemoGymError, match="no server named 'ghost' is running"):
        run_sync(_all(helper, rows("ghost", 2)))

    async def futures_style() -> None:
        for future in helper.run_examples(rows("ghost", 3)):
            await future

    with pytest.raises(NemoGymError, match="no server named 'ghost'"):
        asyncio.run(futures_style())
