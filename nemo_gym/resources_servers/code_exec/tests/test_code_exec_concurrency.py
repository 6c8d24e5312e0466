"""32 concurrent verifies on a real stack: all scored, exactly max_concurrent programs at once (never more, and that
many by construction: every program holds its slot until the test has seen a full round of them and releases it),
and the server's event loop answers /health while a full round of programs is running: a server that ran programs
on its event loop could not answer then (the programs wait for the test, so it would hang, not be slow)."""

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from nemo_gym.resources_servers.code_exec.tests.code_exec_support import (
    GATED_PASS, SERVER, code_exec_stack, code_row, release, running_programs,
)
from tests.helpers.stack import Stack

VERIFIES = 32
MAX_CONCURRENT = 4


@dataclass
class Rounds:
    seen: list[int] = field(default_factory=list)  # programs running at each look
    healthy_while_full: int = 0  # rounds during which /health answered while the round's programs ran


def _release_in_rounds(stack: Stack) -> Rounds:
    """Release the gated programs a round at a time, once MAX_CONCURRENT of them (or all that are left) run at once,
    asking /health first, while they are still held. A program runs until it is released, so none goes by unseen, and
    more than MAX_CONCURRENT at once would be seen (or never make a round)."""
    released: set[int] = set()
    rounds = Rounds()
    deadline = time.monotonic() + 120  # against a hang only: every step waits on state
    with httpx.Client(timeout=60, trust_env=False) as client:
        while len(released) < VERIFIES:
            running = running_programs(stack)
            rounds.seen.append(len(running))
            waiting = running - released
            if len(waiting) == min(MAX_CONCURRENT, VERIFIES - len(released)):
                rounds.healthy_while_full += client.get(f"{stack.url(SERVER)}/health").status_code == 200
                for pid in waiting:
                    release(pid)
                released |= waiting
            assert time.monotonic() < deadline, f"{len(released)} released; running now: {sorted(running)}"
            time.sleep(0.05)
    return rounds


async def _load(stack: Stack) -> tuple[list[dict], Rounds]:
    """(verify results, what the releasing thread saw)."""
    url = stack.url(SERVER)
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        releasing = asyncio.create_task(asyncio.to_thread(_release_in_rounds, stack))
        verifying = asyncio.gather(*(client.post(f"{url}/verify", json=code_row(GATED_PASS))
                                     for _ in range(VERIFIES)))
        try:
            rounds = await releasing  # raises at once where no full round ever runs
            replies = await verifying
        finally:
            verifying.cancel()
    assert all(reply.status_code == 200 for reply in replies)
    return [reply.json() for reply in replies], rounds


def test_32_concurrent_verifies_never_stall_the_event_loop(tmp_path: Path) -> None:
    with code_exec_stack(tmp_path, max_concurrent=MAX_CONCURRENT) as stack:
        results, rounds = asyncio.run(_load(stack))
    assert [r["outcome"] for r in results] == ["passed"] * VERIFIES
    # Bounded above and reached: MAX_CONCURRENT programs ran at once, never more; the others waited for a slot.
    assert max(rounds.seen) == MAX_CONCURRENT
    assert sum(r["queued_s"] > 0 for r in results) >= VERIFIES - MAX_CONCURRENT
    # ... and the event loop answered during every round, while that round's programs were held running.
    assert rounds.healthy_while_full == VERIFIES // MAX_CONCURRENT
