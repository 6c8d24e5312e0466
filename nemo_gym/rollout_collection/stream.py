"""What `RolloutCollectionHelper.run_examples` returns: the results of one run, iterated in one of two styles.

The stream owns its run (see `dispatch.py`) on its helper's engine (`engine.py`). Closing it — `aclose()`, leaving
`async with`, the end of an `async for` (finished, broken out of, raised through, or cancelled), dropping a
`for future in ...` loop early — cancels every rollout still in flight; the last stream of a helper to close closes
the HTTP session.
"""

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

from nemo_gym.errors import InputDataError
from nemo_gym.rollout_collection.dispatch import Dispatch, RolloutItem
from nemo_gym.rollout_collection.engine import RolloutEngine
from nemo_gym.rollout_collection.rollout import RolloutFailure


class RolloutStream:
    """The results of one `run_examples` call. Iterate it once, in one of two styles:

    - `async for row, result in stream` — results in completion order;
    - `for future in stream: row, result = await future` — NeMo Gym's style (futures resolve in completion order);
      needs a sized `examples` (a list, not a generator).

    `result` is the agent's reply with `_ng_task_index`, `_ng_rollout_index` (when the row has them) and
    `agent_ref`, as ng_collect_rollouts writes it. A rollout that still fails after its attempts raises
    `RolloutFailedError` (which ends an `async for` and closes the stream; in the futures style only that future
    raises), unless `return_failures=True`: then `(row, RolloutFailure)` comes instead and the run goes on.
    """

    def __init__(self, examples: Iterable[dict[str, Any]], engine: RolloutEngine, concurrency: int | None,
                 semaphore: asyncio.Semaphore | None, return_failures: bool) -> None:
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"num_samples_in_parallel must be at least 1, got {concurrency}")
        self._examples = examples
        self._return_failures = return_failures
        self._dispatch = Dispatch(examples, engine, concurrency, semaphore)
        self._started = False
        self._closed = False
        self._futures_out: set[asyncio.Task] = set()
        self._taken = 0

    @property
    def closed(self) -> bool:
        """True once nothing of this run is left (after the last result, or after closing); the helper's HTTP
        session is closed then unless another of its streams runs."""
        return self._dispatch.done or (self._closed and not self._started)

    def __aiter__(self) -> "_AsyncResults":
        self._start("async for")
        return _AsyncResults(self)

    def __iter__(self) -> Iterator["asyncio.Task[RolloutItem]"]:
        try:
            count = len(self._examples)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"`for future in run_examples(...)` needs a sized sequence of rows (list, tuple...) to know how many "
                f"futures to yield; got a {type(self._examples).__name__}. Iterate a generator or other bare "
                f"iterable with `async for row, result in run_examples(...)` instead"
            ) from None
        self._start("for")
        return self._futures(count)

    async def __aenter__(self) -> "RolloutStream":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel the rollouts still in flight and leave the helper's engine; returns once both are done."""
        self.stop()
        await self._dispatch.wait_stopped()

    def stop(self) -> None:
        """Start closing without waiting (what a finalizer can do); `aclose()` waits for it."""
        self._closed = True
        for future in self._futures_out:
            future.cancel()
        self._dispatch.stop()

    def _start(self, style: str) -> None:
        if self._started or self._closed:
            raise RuntimeError(f"this run_examples(...) result was already iterated or closed; `{style}` needs a "
                               f"new run_examples call")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(f"iterate run_examples(...) with `{style}` inside a coroutine: the rollouts run on "
                               f"the running event loop") from None
        self._started = True
        self._dispatch.start()

    async def _next(self) -> RolloutItem | None:
        item = await self._dispatch.take()
        if item is not None and isinstance(item[1], RolloutFailure) and not self._return_failures:
            raise item[1].error()
        return item

    def _futures(self, count: int) -> Iterator["asyncio.Task[RolloutItem]"]:
        loop = asyncio.get_running_loop()
        handed = 0
        try:
            for handed in range(1, count + 1):
                future = loop.create_task(self._take_one(count))
                self._futures_out.add(future)
                future.add_done_callback(self._futures_out.discard)
                yield future
        finally:
            if handed < count:  # the caller stopped iterating early
                self.stop()

    async def _take_one(self, count: int) -> RolloutItem:
        self._taken += 1
        last = self._taken == count
        try:
            item = await self._next()
        finally:
            if last:  # nothing awaits the stream after its last future: let it close before that future resolves
                await self._dispatch.wait_stopped()
        if item is None:
            raise InputDataError(f"run_examples got fewer rows than len(examples) = {count}")
        return item


class _AsyncResults:
    """The iterator `async for` gets. Dropping it early (break, an exception in the loop body) stops the run at
    once; it is a separate object because the running rollouts keep the stream itself alive."""

    def __init__(self, stream: RolloutStream) -> None:
        self._stream = stream

    def __aiter__(self) -> "_AsyncResults":
        return self

    async def __anext__(self) -> RolloutItem:
        try:
            item = await self._stream._next()
        except BaseException:  # a failure, a broken run, or the consumer cancelled
            await self._stream.aclose()
            raise
        if item is None:
            await self._stream.aclose()
            raise StopAsyncIteration
        return item

    def __del__(self) -> None:
        self._stream.stop()
