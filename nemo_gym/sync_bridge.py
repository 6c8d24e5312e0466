"""The one bridge from synchronous code to a coroutine: the command-line tools, blocking HTTP polls and the
synchronous rollout entry points all run their coroutines through `run_sync`."""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Coroutine, TypeVar

import uvloop

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to the end on a fresh uvloop loop (the collector's hot path is its event loop). When this thread
    already runs a loop (a notebook, an async trainer), in a worker thread: the caller's loop cannot be re-entered."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nemo_gym_sync") as pool:
        return pool.submit(lambda: run_sync(coro)).result()
