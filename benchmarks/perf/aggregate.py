"""Aggregation benchmark: N shards against one file of the same rows, and time and peak RSS as rows grow.

    .venv/bin/python -m benchmarks.perf.aggregate [--sizes 100000 1000000] [--shards 4] [--rounds 3] [--quick]

Two paths per size, each measurement in a fresh subprocess (so one run's peak does not hide in the next), against a
real resources server with the default hooks (a uvicorn subprocess):
- one file: what the end of ng_collect_rollouts does (read in key order, library metrics, /aggregate_metrics,
  metrics file and HTML report);
- shards: what ng_aggregate_rollouts does by default, the same aggregation over the shard files, writing their
  key-ordered merged file in the same pass.
Rows look like a math run: 4 rollouts per task, 0/1 reward, an extracted answer, token counts, a short transcript,
written in shuffled completion order (dealt round-robin to the shards; the one file holds the same rows).
The two paths alternate for `--rounds` rounds (each round in the other order), so load that drifts falls on both.
Ratios (medians over the rounds): shards against one file in wall and CPU seconds (the aggregating process's own,
which a loaded machine inflates less), and the largest size against the smallest (time and peak RSS).
Writes benchmarks/results/aggregate.json.
"""

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from benchmarks.perf.lifecycle import child_process
from benchmarks.perf.memory import peak_rss_mb
from benchmarks.perf.results import REPO_ROOT, load_average, recording
from nemo_gym.compat.head_detect import NATIVE
from nemo_gym.http_client import HttpClient

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

    head_kind = NATIVE

    def __init__(self, url: str, http: HttpClient) -> None:
        self._url, self.http = url, http

    async def url(self, name: str) -> str:
        return self._url


def measure(url: str, out: Path, paths: list[Path]) -> None:
    """Child process: aggregate once into `out` (shards also merged there); print seconds, CPU-s and peak RSS."""
    from nemo_gym.http_client import HttpClient
    from nemo_gym.rollout_collection.aggregate import aggregate_rollouts

    async def aggregate() -> dict:
        http = HttpClient()
        try:
            result = await aggregate_rollouts(paths, out / "bench_aggregate_metrics.json", _DirectServers(url, http),
                                              merge_into=out / "merged.jsonl" if len(paths) > 1 else None)
        finally:
            await http.aclose()
        return {"rows": result.rows, "key_metrics": result.summaries[0]["key_metrics"]}

    started, cpu = time.perf_counter(), time.process_time()
    figures = asyncio.run(aggregate())
    print(orjson.dumps({"seconds": round(time.perf_counter() - started, 2),
                        "cpu_s": round(time.process_time() - cpu, 2), "peak_rss_mb": peak_rss_mb(),
                        **figures}).decode())


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


def _measure_once(url: str, server: subprocess.Popen, paths: list[Path], out: Path) -> dict:
    out.mkdir()
    try:
        run = subprocess.run([sys.executable, "-m", "benchmarks.perf.aggregate", "--measure", url, str(out),
                              *map(str, paths)], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    finally:
        shutil.rmtree(out)
    status = Path(f"/proc/{server.pid}/status").read_text()
    return {**orjson.loads(run.stdout.strip().splitlines()[-1]),
            "resources_server_peak_rss_mb": round(int(status.split("VmHWM:")[1].split()[0]) / 1024),
            "load_average": load_average()}


def _measure_all(args: argparse.Namespace, url: str, server: subprocess.Popen, tmp: Path) -> list[dict]:
    runs = []
    for size in args.sizes:
        inputs = {"1 file": [tmp / f"rollouts_{size}.jsonl"],
                  f"{args.shards} shards": [tmp / f"rollouts_{size}_shard{i}.jsonl" for i in range(args.shards)]}
        for paths in inputs.values():
            write_rollouts(paths, size)  # the same seed: the same rows in both
        for round_no in range(args.rounds):
            for label, paths in list(inputs.items())[::1 if round_no % 2 == 0 else -1]:
                mb = sum(path.stat().st_size for path in paths) / 1e6
                runs.append({"rollouts": size, "input": label, "files": len(paths), "input_mb": round(mb),
                             "round": round_no + 1, **_measure_once(url, server, paths, tmp / "out")})
                print(runs[-1], flush=True)
        for paths in inputs.values():
            for path in paths:
                path.unlink()
    return runs


def _median(runs: list[dict], size: int, shards: bool, figure: str) -> float:
    return statistics.median(run[figure] for run in runs if run["rollouts"] == size and (run["files"] > 1) == shards)


def _ratios(runs: list[dict], sizes: list[int]) -> dict[str, float]:
    ratios = {}
    for size in sizes:
        for figure in ("seconds", "cpu_s"):
            ratios[f"shards_vs_one_file_{figure}_{size}"] = round(
                _median(runs, size, True, figure) / _median(runs, size, False, figure), 3)
    small, large = min(sizes), max(sizes)
    if small != large:
        for figure in ("seconds", "peak_rss_mb"):
            ratios[f"{figure}_{large}_vs_{small}"] = round(
                _median(runs, large, False, figure) / _median(runs, small, False, figure), 3)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--shards", type=int, default=4, help="shard files for the ng_aggregate_rollouts path")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the two paths per size")
    parser.add_argument("--quick", action="store_true", help="10k and 100k rollouts")
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure[0], Path(args.measure[1]), [Path(p) for p in args.measure[2:]])
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
        recorder.write(_ratios(runs, args.sizes), {
            "settings": {"sizes": args.sizes, "shards": args.shards, "rounds": args.rounds},
            "load_average_at_end": load_average(), "runs": runs})


if __name__ == "__main__":
    main()
