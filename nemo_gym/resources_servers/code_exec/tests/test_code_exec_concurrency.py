"""32 concurrent verifies on a real stack: all scored, at most max_concurrent programs at once, and the server's event
loop keeps answering /health promptly the whole time."""

import asyncio
import time
from pathlib import Path

import httpx

from nemo_gym.resources_servers.code_exec.tests.code_exec_support import SERVER, code_exec_stack, code_row

VERIFIES = 32
MAX_CONCURRENT = 4
PROGRAM_S = 0.5
SLOW_PASS = f"def solve():\n    import time\n    time.sleep({PROGRAM_S})\n    return True\n"


async def _load(url: str) -> tuple[list[dict], list[float], float]:
    """(verify results, /health latencies measured while they ran, wall time of the verifies)."""
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
        started = time.monotonic()
        replies = await asyncio.gather(*(client.post(f"{url}/verify", json=code_row(SLOW_PASS))
                                         for _ in range(VERIFIES)))
        wall = time.monotonic() - started
        done.set()
        await ticking
    assert all(reply.status_code == 200 for reply in replies)
    return [reply.json() for reply in replies], latencies, wall


def test_32_concurrent_verifies_never_stall_the_event_loop(tmp_path: Path) -> None:
    with code_exec_stack(tmp_path, max_concurrent=MAX_CONCURRENT) as stack:
        results, latencies, wall = asyncio.run(_load(stack.url(SERVER)))
    print(f"\n{VERIFIES} verifies in {wall:.2f} s; /health: {len(latencies)} answers, "
          f"slowest {max(latencies) * 1000:.0f} ms")
    assert [r["outcome"] for r in results] == ["passed"] * VERIFIES
    # Bounded: never more than MAX_CONCURRENT programs at once, so the batch takes at least this long ...
    assert wall >= VERIFIES / MAX_CONCURRENT * PROGRAM_S
    assert max(r["queued_s"] for r in results) >= PROGRAM_S
    # ... while the event loop answers throughout.
    assert len(latencies) >= 20 and max(latencies) < 0.5
