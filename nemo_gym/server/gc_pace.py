"""How often the garbage collector runs while a server serves.

CPython collects its youngest generation every 700 net allocations by default. A server with a thousand requests
in flight holds tens of thousands of young objects that are still alive, so each collection promotes them and the
older generations then traverse them again and again. At 1,024 in flight the agent spent 0.40 ms of each rollout
collecting garbage, against 0.05 ms at 64 (docs/performance.md, "Garbage collection"). With 50,000 allocations
between young collections most of a request's objects are freed by reference counting before any collection sees
them; the garbage that cycles leave waits a little longer (a few MB at most).
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager

SERVING_THRESHOLDS = (50_000, 20, 100)


@contextmanager
def serving_pace() -> Iterator[None]:
    """The serving thresholds inside the block, the previous ones after it."""
    previous = gc.get_threshold()
    gc.set_threshold(*SERVING_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
