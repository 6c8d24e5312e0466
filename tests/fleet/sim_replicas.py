"""The simulated fleet's HTTP replicas, run in the test's own event loop for one scenario."""

import asyncio
from typing import Any, Awaitable, Callable

from benchmarks.fleet.fleet import SimFleet
from benchmarks.fleet.profile import H100_LLAMA_8B
from benchmarks.fleet.replica import LoopScheduler
from benchmarks.fleet.workload import MULTI_TURN, Workload
from nemo_gym.http_client import HttpClient

MODEL = "sim-model"
Scenario = Callable[[SimFleet, HttpClient], Awaitable[Any]]


def on_two_replicas(scenario: Scenario, workload: Workload = MULTI_TURN, scale: float = 500.0) -> Any:
    """`scenario`'s result, run against two simulated H100 replicas (`scale` simulated seconds per second) with a
    client; both stopped afterwards."""

    async def main() -> Any:
        fleet = SimFleet([H100_LLAMA_8B] * 2, LoopScheduler(scale), workload, MODEL)
        await fleet.start()
        http = HttpClient()
        try:
            return await scenario(fleet, http)
        finally:
            await http.aclose()
            fleet.stop()

    return asyncio.run(main())
