"""A simulated replica on a clock: answers never come before their simulated finish (a loaded machine makes them
later, never earlier), a death fails what it held, a cancelled caller frees its slot, and the event-queue clock
gives the closed-form throughput."""

import asyncio

import pytest

from benchmarks.fleet.analytic import requests_per_s
from benchmarks.fleet.engine import SimRequest
from benchmarks.fleet.events import EventQueue
from benchmarks.fleet.profile import H100_LLAMA_8B
from benchmarks.fleet.replica import Completion, LoopScheduler, ReplicaDown, SimReplica

SCALE = 200.0  # simulated seconds per wall second


def test_answers_never_come_before_their_simulated_finish() -> None:
    async def main() -> list[tuple[float, Completion]]:
        replica = SimReplica(H100_LLAMA_8B, LoopScheduler(SCALE))
        loop = asyncio.get_running_loop()

        async def one(output: int) -> tuple[float, Completion]:
            started = loop.time()
            done = await replica.generate(SimRequest(prompt_tokens=300, output_tokens=output))
            return (loop.time() - started) * SCALE, done

        return await asyncio.gather(*(one(output) for output in (1, 50, 200, 400, 800)))

    for waited_sim_s, done in asyncio.run(main()):
        assert done.latency_s > 0
        assert waited_sim_s >= done.latency_s * 0.999  # 0.1%: the loop's clock resolution


def test_a_death_fails_what_it_held_and_a_revival_serves_again() -> None:
    async def main() -> tuple[int, bool]:
        replica = SimReplica(H100_LLAMA_8B, LoopScheduler(SCALE))
        requests = [asyncio.create_task(replica.generate(SimRequest(300, 10_000))) for _ in range(3)]
        while replica.snapshot().running < 3:  # wait on state: all three admitted
            await asyncio.sleep(0.001)
        replica.kill()
        failed = sum(isinstance(r, ReplicaDown) for r in await asyncio.gather(*requests, return_exceptions=True))
        with pytest.raises(ReplicaDown):
            await replica.generate(SimRequest(300, 10))
        replica.revive()
        done = await replica.generate(SimRequest(300, 10))
        return failed, done.output_tokens == 10 and replica.snapshot().running == 0

    failed, served = asyncio.run(main())
    assert failed == 3
    assert served


def test_a_cancelled_caller_frees_its_slot() -> None:
    async def main() -> tuple[int, int]:
        replica = SimReplica(H100_LLAMA_8B, LoopScheduler(SCALE))
        request = asyncio.create_task(replica.generate(SimRequest(300, 100_000)))
        while replica.snapshot().running < 1:
            await asyncio.sleep(0.001)
        before = replica.snapshot().running
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        return before, replica.snapshot().running

    assert asyncio.run(main()) == (1, 0)


def test_on_the_event_queue_a_closed_loop_gives_the_closed_form_throughput() -> None:
    queue = EventQueue()
    replica = SimReplica(H100_LLAMA_8B, queue)
    finished: list[Completion] = []

    def answered(done: Completion) -> None:
        finished.append(done)
        send()

    def send() -> None:
        replica.submit(SimRequest(prompt_tokens=512, output_tokens=256), answered, lambda error: None)

    for _ in range(128):
        send()
    queue.run_until(600.0)
    assert len(finished) / 600.0 == pytest.approx(requests_per_s(H100_LLAMA_8B, 128, 512, 256), rel=0.05)
    assert replica.lag_s == 0.0  # in simulated time every answer goes out at its finish
