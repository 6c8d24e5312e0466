"""32 concurrent verifies on a real stack: all scored, exactly max_concurrent programs at once (never more, and that
many by construction: every program holds its slot until the test has seen a full round of them and releases it),
and the server's event loop keeps answering /health promptly the whole time."""

import asyncio
import time
from pathlib import Path

import httpx

from nemo_gym.resources_servers.code_exec.tests.code_exec_support import (
    GATED_PASS, SERVER, code_exec_stack, code_row, release, running_programs,
)
from tests.helpers.stack import Stack

VERIFIES = 32
MAX_CONCURRENT = 4


def _release_in_rounds(stack: Stack) -> list[int]:
    """Release the gated programs a round at a time, once MAX_CONCURRENT of them (or all that are left) run at once;
    return how many ran at each look. A program runs until it is released, so none goes by unseen, and more than
    MAX_CONCURRENT at once would be seen (or never make a round)."""
    released: set[int] = set()
    seen: list[int] = []
    deadline = time.monotonic() + 120  # against a hang only: every step waits on state
    while len(released) < VERIFIES:
        running = running_programs(stack)
        seen.append(len(running))
        waiting = running - released
        if len(waiting) == min(MAX_CONCURRENT, VERIFIES - len(released)):
            for pid in waiting:
                release(pid)
            released |= waiting
        assert time.monotonic() < deadline, f"{len(released)} released; running now: {sorted(running)}"
        time.sleep(0.05)
    return seen


async def _load(stack: Stack) -> tuple[list[dict], list[float], list[int]]:
    """(verify results, /health latencies measured while they ran, programs running at each look)."""
    url = stack.url(SERVER)
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                sent = time.monotonic()
                assert (await client.get(f"{url}/health")).status_code == 200
                latencies.append(time.monotonic() - sent)
                await asyncio.sleep(0.02)

        ticking = asyncio.create_task(ticker())
        releasing = asyncio.create_task(asyncio.to_thread(_release_in_rounds, stack))
        verifying = asyncio.gather(*(client.post(f"{url}/verify", json=code_row(GATED_PASS))
                                     for _ in range(VERIFIES)))
        try:
            seen = await releasing  # raises at once where no full round ever runs
            replies = await verifying
        finally:
            verifying.cancel()
        done.set()
        await ticking
    assert all(reply.status_code == 200 for reply in replies)
    return [reply.json() for reply in replies], latencies, seen


def test_32_concurrent_verifies_never_stall_the_event_loop(tmp_path: Path) -> None:
    with code_exec_stack(tmp_path, max_concurrent=MAX_CONCURRENT) as stack:
        results, latencies, seen = asyncio.run(_load(stack))
    print(f"\n{VERIFIES} verifies; programs at once: at most {max(seen)} over {len(seen)} looks; "
          f"/health: {len(latencies)} answers, slowest {max(latencies) * 1000:.0f} ms")
    assert [r["outcome"] for r in results] == ["passed"] * VERIFIES
    # Bounded above and reached: MAX_CONCURRENT programs ran at once, never more; the others waited for a slot.
    assert max(seen) == MAX_CONCURRENT
    assert sum(r["queued_s"] > 0 for r in results) >= VERIFIES - MAX_CONCURRENT
    # ... while the event loop answers throughout.
    assert len(latencies) >= 20 and max(latencies) < 0.5
