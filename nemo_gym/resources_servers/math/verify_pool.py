"""`answers_match` off the event loop: a small spawn-context process pool with an outer timeout.

math_verify's SIGALRM timeouts only work in a process's main thread, and its sympy work is CPU-bound, so neither
the event loop nor a thread pool can host it. Spawn, not fork: forking a process that already runs an event loop,
sockets or torch threads is unsafe. As with any spawn pool, spawned workers import the main module again: a script
that creates a pool needs the `if __name__ == "__main__":` guard.
"""

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from nemo_gym.resources_servers.math.verifier import answers_match


class VerifyTimeoutError(TimeoutError):
    """One answer check ran past the pool's timeout (a backstop over math_verify's own timeouts)."""


CHECK_TIMEOUT_S = 30.0  # one answer check: a backstop over math_verify's own timeouts


class VerifyPool:
    def __init__(self, workers: int = 2, timeout_s: float = CHECK_TIMEOUT_S) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = workers
        self.timeout_s = timeout_s
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"))

    async def warm(self) -> None:
        """Start every worker and import math_verify there (seconds of sympy imports) before real work arrives."""
        await asyncio.gather(*(self.answers_match("1", "1") for _ in range(self.workers)))

    async def answers_match(self, predicted: str, expected: str) -> bool:
        pool = self._pool
        try:
            # Inside the try: a pool that broke since the last check refuses at submit already.
            check = asyncio.get_running_loop().run_in_executor(pool, answers_match, predicted, expected)
            return await asyncio.wait_for(check, self.timeout_s)
        except asyncio.TimeoutError:
            raise VerifyTimeoutError(
                f"checking {predicted!r} against {expected!r} took over {self.timeout_s}s") from None
        except BrokenProcessPool as exc:
            # A dead worker breaks the whole executor for good: this check failed, later ones get a fresh pool.
            if self._pool is pool:
                self._pool = self._new_pool()
                pool.shutdown(wait=False)
            raise BrokenProcessPool(
                f"a verifier worker died ({exc}); in a script, create the pool under "
                f"`if __name__ == '__main__':`, since spawned workers import the main module again") from exc

    def shutdown(self, wait: bool = True) -> None:
        """Stop the workers; queued checks are cancelled. `wait=False` returns at once (a server shutting down)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)
