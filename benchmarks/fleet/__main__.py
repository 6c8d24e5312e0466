"""Serve a simulated fleet until SIGTERM or SIGINT:

    python -m benchmarks.fleet --replicas 8 --time-scale 1 --workload multi-turn --ready-file fleet.json [--slow 0:2]

Once every replica listens, `--ready-file` gets `{"base_urls": [...], "control_url": ...}` (written whole, then
renamed into place, so a reader never sees half of it).
"""

import argparse
import asyncio
import os
import signal
from pathlib import Path

import orjson
import uvloop

from benchmarks.fleet.fleet import SimFleet
from benchmarks.fleet.profile import H100_LLAMA_8B
from benchmarks.fleet.replica import LoopScheduler
from benchmarks.fleet.workload import WORKLOADS

DEFAULT_MODEL = "sim-llama-3.1-8b"


def _slow(spec: str) -> tuple[int, float]:
    index, _, factor = spec.partition(":")
    return int(index), float(factor or 2)


async def serve(args: argparse.Namespace) -> None:
    profiles = [H100_LLAMA_8B] * args.replicas
    for index, factor in args.slow:
        profiles[index] = H100_LLAMA_8B.slower(factor)
    fleet = SimFleet(profiles, LoopScheduler(args.time_scale), WORKLOADS[args.workload], args.model)
    await fleet.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    ready = Path(args.ready_file)
    partial = ready.with_suffix(".partial")
    partial.write_bytes(orjson.dumps({"base_urls": fleet.base_urls, "control_url": fleet.control_url,
                                      "pid": os.getpid()}))
    partial.rename(ready)
    try:
        await stop.wait()
    finally:
        fleet.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="multi-turn")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--slow", type=_slow, action="append", default=[], metavar="INDEX:FACTOR",
                        help="make replica INDEX FACTOR times slower (repeatable)")
    parser.add_argument("--ready-file", required=True)
    uvloop.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
