"""State a server's worker processes share: memory and a lock made before the launcher forks them.

The launcher builds its server object before it forks the workers (nemo_gym.server.launch), so what the first object
makes here is inherited by every worker, whose own server object finds it again by its key (`made_once`). The memory
is an anonymous shared mapping (a fork maps the same pages, where a write is seen by all), and the lock a
process-shared one; each holder packs its own fields into the page. Used by the endpoint rate limits
(responses_api_models/rate_limits.py) and vllm_model's replica router (vllm_model/routing.py).
"""

import mmap
import multiprocessing
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")
_MADE: dict[Hashable, object] = {}


class SharedPage:
    """`size` bytes of zeroed memory, and a lock, shared with the processes forked after it was made."""

    def __init__(self, size: int) -> None:
        self.memory = mmap.mmap(-1, size)  # anonymous and MAP_SHARED
        self.lock = multiprocessing.get_context("fork").Lock()


def made_once(key: Hashable, make: Callable[[], T]) -> T:
    """`make()`'s result for `key`, made once per process tree: a worker forked after it was made gets the same."""
    if key not in _MADE:
        _MADE[key] = make()
    return _MADE[key]  # type: ignore[return-value]
