"""Our HTTP client against aiohttp's and httpx's on the hot path: the agent -> model call, against our real server.

    .venv/bin/python -m benchmarks.perf.http_clients [--requests 10000] [--concurrency 1024]

One uvicorn server (the instant stub chat model, started by ng_run) answers; one client process sends the same chat
request with nemo_gym.http_client (nemo_gym.http_wire), with aiohttp's ClientSession (configured as nemo_gym's
client was before http_wire) and with httpx.AsyncClient (as it was before aiohttp), in turn, on uvloop as the
collector and the servers run. Prints requests/s and the client's CPU ms per request; the ratios are the others'
CPU per request over ours. Writes benchmarks/results/http_clients.json.
"""

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any, Awaitable, Callable, Coroutine

import aiohttp
import httpx
import orjson
import uvloop

from benchmarks.perf.harness import STUB_CHAT, ng_run
from benchmarks.perf.results import load_average, recording
from nemo_gym.http_client import HttpClient
from nemo_gym.server.supervisor import free_port

BODY = {"model": "stub", "messages": [{"role": "user", "content": "What's the weather in Paris?"}]}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _drive(send: Callable[[], Awaitable[Any]], requests: int, concurrency: int) -> dict[str, float]:
    left = iter(range(requests))

    async def worker() -> None:
        for _ in left:
            await send()

    started, cpu = time.perf_counter(), _cpu_s()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds, cpu = time.perf_counter() - started, _cpu_s() - cpu
    return {"requests_per_s": round(requests / seconds), "client_cpu_ms_per_request": round(1000 * cpu / requests, 3)}


async def with_httpx(url: str, requests: int, concurrency: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60, pool=None), limits=limits, trust_env=False) as client:
        content = orjson.dumps(BODY)

        async def send() -> Any:
            response = await client.post(url, content=content, headers={"content-type": "application/json"})
            return orjson.loads(response.content)

        return await _drive(send, requests, concurrency)


async def with_aiohttp(url: str, requests: int, concurrency: int) -> dict[str, float]:
    connector = aiohttp.TCPConnector(limit=4096, keepalive_timeout=4.0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=600)
    async with aiohttp.ClientSession(connector=connector, trust_env=False, skip_auto_headers=("User-Agent",),
                                     timeout=timeout) as session:
        content = orjson.dumps(BODY)

        async def send() -> Any:
            async with session.post(url, data=content, headers={"content-type": "application/json"}) as response:
                return orjson.loads(await response.read())

        return await _drive(send, requests, concurrency)


async def with_nemo_gym(url: str, requests: int, concurrency: int) -> dict[str, float]:
    client = HttpClient(max_connections=concurrency)
    try:
        return await _drive(lambda: client.post_json(url, BODY), requests, concurrency)
    finally:
        await client.aclose()


CLIENTS = {"nemo_gym": with_nemo_gym, "aiohttp": with_aiohttp, "httpx": with_httpx}
BARE_RUNS = 3


def bare_requests_per_s(client: Callable[[str, int, int], Coroutine[Any, Any, dict[str, float]]], url: str,
                        requests: int, concurrency: int) -> tuple[float, list[float]]:
    """A bare client as the baseline of a stack: the median requests/s of `BARE_RUNS` runs, and the runs. A bare
    client is bound by its own CPU, whose rate moves by a third from one run to the next on a shared machine."""
    runs = [uvloop.run(client(url, requests, concurrency))["requests_per_s"] for _ in range(BARE_RUNS)]
    return median(runs), runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="2,000 requests, one round")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds = 2000, 1
    port = free_port()
    config = {"stub_chat": {"responses_api_models": {"stub_chat": {"entrypoint": str(STUB_CHAT), "port": port}}}}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    results: list[dict[str, Any]] = []
    with recording("http_clients", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ng_http_") as tmp, \
            ng_run(Path(tmp), config):
        for _ in range(args.rounds):
            for name, run in CLIENTS.items():
                figures = uvloop.run(run(url, args.requests, args.concurrency))
                results.append({"client": name, "concurrency": args.concurrency, **figures,
                                "load_average": load_average()})
                print(f"{name:<8} {figures['requests_per_s']:>7} requests/s  "
                      f"{figures['client_cpu_ms_per_request']:.3f} client cpu-ms/request  load {load_average()}",
                      flush=True)
        rate = {name: sum(r["requests_per_s"] for r in results if r["client"] == name) / args.rounds
                for name in CLIENTS}
        cpu = {name: sum(r["client_cpu_ms_per_request"] for r in results if r["client"] == name) / args.rounds
               for name in CLIENTS}
        recorder.write({f"{name}_vs_nemo_gym_client_cpu_per_request": round(cpu[name] / cpu["nemo_gym"], 2)
                        for name in CLIENTS if name != "nemo_gym"},
                       {"settings": {"requests": args.requests, "concurrency": args.concurrency,
                                     "rounds": args.rounds},
                        "mean_requests_per_s": {k: round(v) for k, v in rate.items()},
                        "mean_client_cpu_ms_per_request": {k: round(v, 3) for k, v in cpu.items()},
                        "runs": results})


if __name__ == "__main__":
    main()
