"""Stopping early — break, an exception, a cancelled consumer — cancels the rollouts in flight, stops dispatching,
closes the HTTP session and gives a shared semaphore its permits back: nothing is left running or connected."""

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable

import pytest

from nemo_gym.errors import RolloutFailedError
from nemo_gym.rollout_collection import RolloutCollectionHelper, RolloutStream
from nemo_gym.sync_bridge import run_sync
from tests.collection.conftest import CollectionStack
from tests.collection.helper_util import connections_to, other_tasks, rows, stats


_ALIVE_BEFORE: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _threads_alive_before() -> None:
    """The threads alive when a test starts are not the helper's: another suite's session fixture may hold one
    (the reliability stack's fault proxy runs in a thread of this process)."""
    _ALIVE_BEFORE.clear()
    _ALIVE_BEFORE.update(threading.enumerate())


async def _settled(stack: CollectionStack, timeout_s: float = 2.0) -> None:
    """Wait (a finalizer closes in a task) until no task of ours runs and no connection to the stack is open."""
    deadline = time.monotonic() + timeout_s
    urls = (stack.stack.url("slow_agent"), stack.stack.head_url)
    while other_tasks() or any(connections_to(url) for url in urls):
        assert time.monotonic() < deadline, (other_tasks(), [connections_to(url) for url in urls])
        await asyncio.sleep(0.01)


def _check_stopped(stack: CollectionStack, runs_at_stop: int) -> None:
    """Nothing of ours can send another rollout: the event loop that ran the helper is gone (run_sync returned,
    after _settled saw no task and no connection left), and no thread of ours is left that could run one. Once the
    agent has finished what it was handling, its count is the one at the stop."""
    assert [t.name for t in threading.enumerate() if t not in _ALIVE_BEFORE] == []
    deadline = time.monotonic() + 30  # against a hang only: this waits on the agent's state
    while stats(stack, "slow_agent")["in_flight"]:
        assert time.monotonic() < deadline, stats(stack, "slow_agent")
        time.sleep(0.01)
    assert stats(stack, "slow_agent")["runs"] == runs_at_stop


def test_leaving_async_with_early_closes_everything_at_once(collection_stack: CollectionStack) -> None:
    stats(collection_stack, "slow_agent", reset=True)
    semaphore = asyncio.Semaphore(8)

    async def consume() -> tuple[RolloutStream, set, int, int]:
        async with RolloutCollectionHelper(collection_stack.stack.head_url).run_examples(
                rows("slow_agent", 500), semaphore=semaphore) as stream:
            async for _ in stream:
                break
        runs = stats(collection_stack, "slow_agent")["runs"]
        return stream, other_tasks(), connections_to(collection_stack.stack.url("slow_agent")), runs

    stream, left, open_connections, runs = run_sync(consume())
    assert stream.closed and left == set() and open_connections == 0
    assert runs <= 9  # the first 8 rows, plus at most one dispatched while the first result was handed over
    _check_stopped(collection_stack, runs)
    assert not semaphore.locked() and semaphore._value == 8  # every permit came back


def _run_plain(stack: CollectionStack, body: Callable[[RolloutCollectionHelper], Awaitable[Any]],
               **policy: Any) -> int:
    """Run `body` on uvloop (as the CLI does), wait until everything settled, and return the agent's /run count."""
    stats(stack, "slow_agent", reset=True)

    async def main() -> int:
        await body(RolloutCollectionHelper(stack.stack.head_url, **policy))
        await _settled(stack)
        return stats(stack, "slow_agent")["runs"]

    return run_sync(main())


def test_break_out_of_a_plain_async_for(collection_stack: CollectionStack) -> None:
    async def body(helper: RolloutCollectionHelper) -> None:
        async for _ in helper.run_examples(rows("slow_agent", 500), num_samples_in_parallel=8):
            break

    _check_stopped(collection_stack, _run_plain(collection_stack, body))


def test_break_out_of_the_futures_style(collection_stack: CollectionStack) -> None:
    async def body(helper: RolloutCollectionHelper) -> None:
        for future in helper.run_examples(rows("slow_agent", 500), num_samples_in_parallel=8):
            await future
            break

    _check_stopped(collection_stack, _run_plain(collection_stack, body))


def test_an_exception_in_the_loop_body(collection_stack: CollectionStack) -> None:
    async def body(helper: RolloutCollectionHelper) -> None:
        with pytest.raises(KeyError):
            async for row, _ in helper.run_examples(rows("slow_agent", 500), num_samples_in_parallel=8):
                row["missing"]

    _check_stopped(collection_stack, _run_plain(collection_stack, body))


def test_a_cancelled_consumer(collection_stack: CollectionStack) -> None:
    async def body(helper: RolloutCollectionHelper) -> None:
        consuming = asyncio.Event()

        async def consume() -> None:
            async for _ in helper.run_examples(rows("slow_agent", 500), num_samples_in_parallel=8):
                consuming.set()

        consumer = asyncio.create_task(consume())
        await consuming.wait()  # cancelled mid-stream: rollouts have finished and others are in flight
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer

    _check_stopped(collection_stack, _run_plain(collection_stack, body))


def test_a_failure_ends_the_iteration_and_closes(collection_stack: CollectionStack) -> None:
    async def body(helper: RolloutCollectionHelper) -> None:
        mixed = rows("slow_agent", 200) + rows("always_500", 1, start=200)
        with pytest.raises(RolloutFailedError):
            async for _ in helper.run_examples(mixed[::-1], num_samples_in_parallel=8):
                pass

    helper_runs = _run_plain(collection_stack, body, max_attempts=1)
    assert helper_runs < 200
    _check_stopped(collection_stack, helper_runs)
