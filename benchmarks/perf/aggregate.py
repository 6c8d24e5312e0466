"""Aggregation benchmark: time and peak RSS of aggregation over 100k and 1M synthetic rollouts.

    .venv/bin/python -m benchmarks.perf.aggregate [--sizes 100000 1000000] [--shards 4] [--quick]

Two paths per size, each in a fresh subprocess (so one run's peak does not hide in the next), against a real
resources server with the default hooks (a uvicorn subprocess):
- one file: what the end of ng_collect_rollouts does (read in key order, library metrics, /aggregate_metrics,
  metrics file and HTML report);
- shards: what ng_aggregate_rollouts does by default, `merge_shards` of the shard files into one key-ordered file,
  then the same aggregation over it.
Rows look like a math run: 4 rollouts per task, 0/1 reward, an extracted answer, token counts, a short transcript,
written in shuffled completion order (dealt round-robin to the shards).
Ratios: the largest size against the smallest (time and peak RSS), shards against one file.
Writes benchmarks/results/aggregate.json.
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

from benchmarks.perf.lifecycle import child_process
from benchmarks.perf.memory import peak_rss_mb
from benchmarks.perf.results import REPO_ROOT, load_average, recording
REPEATS = 4


def write_rollouts(paths: list[Path], rows: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    outs = [open(path, "wb", buffering=1 << 20) for path in paths]
    try:
        keys = [(t, r) for t in range(rows // REPEATS) for r in range(REPEATS)]
        rng.shuffle(keys)  # completion order, as a real run writes them
        for i, (task, rollout) in enumerate(keys):
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
            outs[i % len(outs)].write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
    finally:
        for out in outs:
            out.close()


class _DirectServers:
    """Stands in for the head server lookup: the resources server answers /aggregate_metrics itself."""

    def __init__(self, url: str) -> None:
        self._url = url

    async def url(self, name: str) -> str:
        return self._url


def measure(url: str, paths: list[Path]) -> None:
    """Child process: (merge the shards, then) aggregate once; print seconds and peak RSS."""
    from nemo_gym.rollout_collection.aggregate import aggregate_rollouts, merge_shards

    started = time.perf_counter()
    figures: dict = {}
    if len(paths) > 1:
        merged = paths[0].with_name("merged.jsonl")
        merge_shards(paths, merged)
        figures["merge_seconds"] = round(time.perf_counter() - started, 2)
        paths = [merged]
    result = asyncio.run(aggregate_rollouts(paths, paths[0].with_name("bench_aggregate_metrics.json"),
                                            _DirectServers(url)))
    figures.update(rows=result.rows, seconds=round(time.perf_counter() - started, 2), peak_rss_mb=peak_rss_mb(),
                   key_metrics=result.summaries[0]["key_metrics"])
    print(orjson.dumps(figures).decode())


def _server_args(port: int) -> list[str]:
    code = (
        "from nemo_gym.config.servers import ServerSpec\n"
        "from nemo_gym.resources_servers.base import ResourcesServer\n"
        "class Bench(ResourcesServer):\n"
        "    async def verify(self, row, response): return {'reward': 0.0}\n"
        f"Bench(ServerSpec('bench', 'resources_servers', 'bench')).serve('127.0.0.1', {port})\n"
    )
    return [sys.executable, "-c", code]


def _wait_healthy(url: str, server: subprocess.Popen) -> None:
    import httpx

    while True:
        if server.poll() is not None:
            raise RuntimeError(f"the resources server exited with {server.returncode}")
        try:
            httpx.get(f"{url}/health", trust_env=False)
            return
        except httpx.TransportError:
            time.sleep(0.2)


def _measure_all(args: argparse.Namespace, url: str, server: subprocess.Popen, tmp: Path) -> list[dict]:
    runs = []
    for size in args.sizes:
        single = [tmp / f"rollouts_{size}.jsonl"]
        shards = [tmp / f"rollouts_{size}_shard{i}.jsonl" for i in range(args.shards)]
        for label, paths in (("1 file", single), (f"{args.shards} shards", shards)):
            write_rollouts(paths, size)
            mb = sum(path.stat().st_size for path in paths) / 1e6
            run = subprocess.run([sys.executable, "-m", "benchmarks.perf.aggregate", "--measure", url,
                                  *map(str, paths)], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
            status = Path(f"/proc/{server.pid}/status").read_text()
            server_rss = int(status.split("VmHWM:")[1].split()[0]) / 1024
            runs.append({"rollouts": size, "input": label, "files": len(paths), "input_mb": round(mb),
                         **orjson.loads(run.stdout.strip().splitlines()[-1]),
                         "resources_server_peak_rss_mb": round(server_rss), "load_average": load_average()})
            print(runs[-1], flush=True)
            for path in tmp.iterdir():
                path.unlink()
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--shards", type=int, default=4, help="shard files for the ng_aggregate_rollouts path")
    parser.add_argument("--quick", action="store_true", help="10k and 100k rollouts")
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure[0], [Path(p) for p in args.measure[1:]])
        return
    if args.quick:
        args.sizes = [10_000, 100_000]
    from nemo_gym.server.supervisor import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with recording("aggregate", args.quick) as recorder, tempfile.TemporaryDirectory() as tmp, \
            child_process(_server_args(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as server:
        _wait_healthy(url, server)
        runs = _measure_all(args, url, server, Path(tmp))
        files = [run for run in runs if run["files"] == 1]
        small, large = files[0], files[-1]
        ratios = {
            f"seconds_{large['rollouts']}_vs_{small['rollouts']}": round(large["seconds"] / small["seconds"], 2),
            f"peak_rss_{large['rollouts']}_vs_{small['rollouts']}": round(large["peak_rss_mb"] / small["peak_rss_mb"],
                                                                          3),
            "shards_vs_one_file_seconds": {
                str(run["rollouts"]): round(run["seconds"] / one["seconds"], 2)
                for one, run in zip(runs[0::2], runs[1::2])},
        }
        recorder.write(ratios, {"settings": {"sizes": args.sizes, "shards": args.shards}, "runs": runs})


if __name__ == "__main__":
    main()
