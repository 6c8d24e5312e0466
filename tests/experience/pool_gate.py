"""A job for a verifier pool's worker process that holds the worker until the test lets it go (spawned workers import
this module by name, so it lives in a module, not in a test)."""

import time
from pathlib import Path


def hold_until(path: str, timeout_s: float) -> bool:
    """Occupy this worker until `path` exists (True), or give up after `timeout_s` (False: nobody let it go)."""
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
