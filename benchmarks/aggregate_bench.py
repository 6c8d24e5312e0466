"""Aggregation benchmark: time and peak RSS of `aggregate_rollouts` over 100k and 1M synthetic rollouts.

    .venv/bin/python benchmarks/aggregate_bench.py [--sizes 100000 1000000]

Each size runs in a fresh subprocess (so one size's peak does not hide in the next) against a real resources
server with the default hooks (a uvicorn subprocess), i.e. the same path as the end of ng_collect_rollouts: read in
key order, library metrics, compact rows POSTed to /aggregate_metrics, metrics file and HTML report written.
Rows look like a math run: 4 rollouts per task, 0/1 reward, an extracted answer, token counts, a short transcript.
"""

import argparse
import asyncio
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.perf.memory import peak_rss_mb  # noqa: E402 - the repo root must be importable first

REPEATS = 4


def write_rollouts(path: Path, rows: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "wb", buffering=1 << 20) as out:
        keys = [(t, r) for t in range(rows // REPEATS) for r in range(REPEATS)]
        rng.shuffle(keys)  # completion order, as a real run writes them
        for task, rollout in keys:
            skill = (task % 10) / 10
            correct = rng.random() < skill
            answer = str(task) if correct else str(rng.randint(0, 5))
            row = {"_ng_task_index": task, "_ng_rollout_index": rollout,
                   "responses_create_params": {"input": [{"role": "user", "content": f"What is {task} + 0?"}]},
                   "response": {"id": f"resp_{task}_{rollout}", "object": "response", "output": [
                       {"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": f"The answer is \\boxed{{{answer}}}."}]}]},
                   "expected_answer": str(task), "extracted_answer": answer, "reward": float(correct),
                   "num_output_tokens": rng.randint(20, 900), "latency_s": rng.random() * 5,
                   "agent_ref": {"name": "bench_agent"}}
            out.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))


class _DirectServers:
    """Stands in for the head server lookup: the resources server answers /aggregate_metrics itself."""

    def __init__(self, url: str) -> None:
        self._url = url

    async def url(self, name: str) -> str:
        return self._url


def measure(path: Path, url: str) -> None:
    """Child process: aggregate once and print seconds and peak RSS."""
    from nemo_gym.rollout_collection.aggregate import aggregate_rollouts

    started = time.perf_counter()
    result = asyncio.run(aggregate_rollouts([path], path.with_name("bench_aggregate_metrics.json"),
                                            _DirectServers(url)))
    elapsed = time.perf_counter() - started
    print(orjson.dumps({"rows": result.rows, "seconds": round(elapsed, 2), "peak_rss_mb": peak_rss_mb(),
                        "key_metrics": result.summaries[0]["key_metrics"]}).decode())


def _serve(port: int) -> subprocess.Popen:
    code = (
        "from nemo_gym.config.servers import ServerSpec\n"
        "from nemo_gym.resources_servers.base import ResourcesServer\n"
        "class Bench(ResourcesServer):\n"
        "    async def verify(self, row, response): return {'reward': 0.0}\n"
        f"Bench(ServerSpec('bench', 'resources_servers', 'bench')).serve('127.0.0.1', {port})\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(Path(args.measure[0]), args.measure[1])
        return
    from nemo_gym.server.supervisor import free_port

    import httpx

    port = free_port()
    server = _serve(port)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                httpx.get(f"{url}/health", trust_env=False)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        with tempfile.TemporaryDirectory() as tmp:
            for size in args.sizes:
                path = Path(tmp) / f"rollouts_{size}.jsonl"
                write_rollouts(path, size)
                mb = path.stat().st_size / 1e6
                run = subprocess.run([sys.executable, __file__, "--measure", str(path), url],
                                     capture_output=True, text=True, check=True)
                server_rss = int(Path(f"/proc/{server.pid}/status").read_text().split("VmHWM:")[1].split()[0]) / 1024
                print(f"{size} rollouts ({mb:.0f} MB): {run.stdout.strip()} resources_server_peak_rss_mb="
                      f"{server_rss:.0f}", flush=True)
                path.unlink()
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
