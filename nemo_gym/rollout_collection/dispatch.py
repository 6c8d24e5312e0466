"""The engine behind `run_examples`: pull rows lazily, run each under a permit, queue results as they finish.

A dispatcher task takes a permit, then pulls the next row from the caller's iterable and starts one task for it
on the helper's engine (`engine.py`: `run_rollout`, the CLI's attempt, timeout and failure rules). The permit travels with the row's result and is given
back when the caller takes that result. So rows pulled but not yet taken never exceed the concurrency, however long
the iterable, and a slow consumer slows the dispatch instead of piling results up in memory.

Stopping cancels the dispatcher; on its way out it cancels the rollouts in flight and leaves the engine (the last
stream out closes its HTTP session), so whatever stops a run (the caller, a broken row, the event loop shutting
down) leaves nothing running, or connected once no other stream of the helper runs.
"""

import asyncio
from collections.abc import Iterable
from typing import Any, Union

from nemo_gym.errors import InputDataError
from nemo_gym.rollout_collection.engine import RolloutEngine
from nemo_gym.rollout_collection.rollout import RolloutFailure, RolloutSuccess, result_row
from nemo_gym.run_format import AGENT_REF

RolloutItem = tuple[dict[str, Any], Union[dict[str, Any], RolloutFailure]]

_END = object()  # queue marker: every row's result was queued
_BROKEN = object()  # queue marker: the run cannot go on (`Dispatch.error` says why)


class Permits:
    """A local concurrency cap and/or a caller's semaphore (possibly shared with other work): take both or none."""

    def __init__(self, limit: int | None, shared: asyncio.Semaphore | None) -> None:
        self._semaphores = [s for s in (asyncio.Semaphore(limit) if limit else None, shared) if s is not None]

    async def acquire(self) -> None:
        taken: list[asyncio.Semaphore] = []
        try:
            for semaphore in self._semaphores:
                await semaphore.acquire()
                taken.append(semaphore)
        except BaseException:
            for semaphore in taken:
                semaphore.release()
            raise

    def release(self) -> None:
        for semaphore in self._semaphores:
            semaphore.release()


def _agent_of(position: int, row: Any) -> str:
    ref = row.get(AGENT_REF) if isinstance(row, dict) else None
    name = ref.get("name") if isinstance(ref, dict) else None
    if not isinstance(name, str) or not name:
        raise InputDataError(f'row {position} of run_examples has no agent_ref {{"name": "<agent>"}}: '
                             f"{str(row)[:200]}")
    return name


class Dispatch:
    """One run of rows through their agents; `take()` hands out (row, result or RolloutFailure) as they finish."""

    def __init__(self, examples: Iterable[Any], engine: RolloutEngine, limit: int | None,
                 semaphore: asyncio.Semaphore | None) -> None:
        """Concurrency: `limit` and/or the caller's `semaphore`; with neither, the engine's shared limit."""
        self._examples = examples
        self._engine = engine
        self._limit = limit
        self._semaphore = semaphore
        self._permits = Permits(None, None)  # set by start(), on the loop the run uses
        self._queue: asyncio.Queue = asyncio.Queue()  # bounded by the permits
        self._rollouts: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None
        self._stopping = False  # nobody will take more results
        self._winding_down = False  # the dispatcher is closing up: a cancel now would cut the session close short
        self.error: BaseException | None = None

    @property
    def done(self) -> bool:
        """No rollout of this run is left and it left the engine."""
        return self._task is not None and self._task.done()

    def start(self) -> None:
        self._engine.bind()
        own = self._limit is not None or self._semaphore is not None
        self._permits = Permits(self._limit, self._semaphore if own else self._engine.shared_limit)
        self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def take(self) -> RolloutItem | None:
        """The next result in completion order; None after the last; raises what broke the run."""
        if self.error is None:
            item = await self._queue.get()
            if item is _END or item is _BROKEN:
                self._queue.put_nowait(item)  # for the next waiter too (several futures may be waiting)
            if item is _END:
                return None
            if item is not _BROKEN:
                self._permits.release()
                result: RolloutItem = item  # the queue holds results besides the two sentinels
                return result
        await self.wait_stopped()  # the error comes after the close
        raise self.error  # type: ignore[misc]

    def stop(self) -> None:
        """Stop now (callable from a finalizer): the dispatcher cancels what runs and leaves the engine."""
        self._stopping = True
        if self._task is None:
            return
        if self._task.done():
            self._drain()
        elif not self._winding_down and not self._task.get_loop().is_closed():
            self._task.cancel()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            await asyncio.wait({self._task})

    async def _dispatch(self) -> None:
        self._engine.enter()  # here, not in start(): a task cancelled before its first step never runs `finally`
        position = 0
        try:
            rows = iter(self._examples)
            while True:
                await self._permits.acquire()
                try:
                    row = next(rows, _END)
                except BaseException:
                    self._permits.release()
                    raise
                if row is _END:
                    self._permits.release()
                    break
                rollout = asyncio.get_running_loop().create_task(self._one(position, row))
                self._rollouts.add(rollout)
                rollout.add_done_callback(self._rollout_done)
                position += 1
            while self._rollouts:
                await asyncio.wait(set(self._rollouts))
            self._queue.put_nowait(_END)
        except asyncio.CancelledError:
            pass  # stopped, or the run broke: the finally below cleans up either way
        except Exception as exc:  # the caller's iterable raised
            self._break(exc)
        finally:
            self._winding_down = True
            try:
                for rollout in self._rollouts:
                    rollout.cancel()
                if self._rollouts:
                    await asyncio.wait(set(self._rollouts))
            finally:  # even when cancelled meanwhile (the loop shutting down): its first step closes the sockets
                if self._stopping or self.error is not None:
                    self._drain()  # no more results will be taken
                await self._engine.leave()

    async def _one(self, position: int, row: Any) -> bool:
        """Run one row and queue its result; True when queued (its permit then travels with the result)."""
        try:
            outcome = await self._engine.run(_agent_of(position, row), row)
        except Exception as exc:  # this row cannot run at all (no agent_ref, unknown agent, no head server)
            self._break(exc)
            return False
        result = result_row(row, outcome.reply) if isinstance(outcome, RolloutSuccess) else outcome
        self._queue.put_nowait((row, result))
        return True

    def _rollout_done(self, rollout: asyncio.Task) -> None:
        # A callback, not an except clause: a task cancelled before its first step never runs its own code.
        self._rollouts.discard(rollout)
        if rollout.cancelled() or not rollout.result():
            self._permits.release()

    def _break(self, error: BaseException) -> None:
        """Stop the whole run: every waiting and later `take` raises `error`."""
        if self.error is None:
            self.error = error
            self._queue.put_nowait(_BROKEN)
        if asyncio.current_task() is not self._task and not self._winding_down:
            self._task.cancel()  # type: ignore[union-attr]

    def _drain(self) -> None:
        """Give back the permits of results nobody will take (they matter when the semaphore is shared)."""
        markers = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is _END or item is _BROKEN:
                markers.append(item)
            else:
                self._permits.release()
        for marker in markers:
            self._queue.put_nowait(marker)
