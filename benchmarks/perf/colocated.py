"""ng_run's servers in one process (`+colocate_servers=true`) against one process each (`=false`), side by side.

    .venv/bin/python -m benchmarks.perf.colocated [--rounds 5] [--quick]

Two weather stacks (collector -> simple_agent -> vllm_model -> instant stub chat model, as in `collector`), one
colocated, run the same rows at the same concurrency in turn, round after round (which goes first alternates), each
beside the bare aiohttp client posting the stack's own model requests (two per rollout) straight to that stack's
stub in the same round: `stack_vs_bare_same_requests` as in `collector` (1.0: the stack costs nothing beyond the
model's requests). The bare client is bound by its own CPU, which varies by a third from one run to the next on a
shared machine, so each round takes the median of three of its runs (http_clients.bare_requests_per_s). Cases:
10,000 rows at 256 concurrent and 2,000 at 64. Ratios: per round, colocated / apart rollouts/s and CPU-ms per
rollout, and each layout's stack / bare client; each reported as the median over the rounds, with the rounds'
range. Writes benchmarks/results/colocated.json. Never run by the test suite.
"""

import argparse
import tempfile
from contextlib import ExitStack
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.perf.harness import WEATHER_AGENT, run_collector, weather_stack, write_rows
from benchmarks.perf.http_clients import BARE_RUNS, bare_requests_per_s, with_aiohttp
from benchmarks.perf.results import load_average, recording

MODEL_CALLS_PER_ROLLOUT = 2  # the weather rollout: a tool call, then the answer
LAYOUTS = {"apart": False, "colocated": True}  # colocate_servers (false: ng_run's default)


def _summary(values: list[float]) -> dict[str, Any]:
    return {"median": round(median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def _of(runs: list[dict[str, Any]], layout: str, rows: int, concurrency: int) -> list[dict[str, Any]]:
    """The case's runs of `layout`, by round (the order they ran in)."""
    return [run for run in runs if (run["layout"], run["rows"], run["concurrency"]) == (layout, rows, concurrency)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 rows at 64, one round: a smoke run")
    args = parser.parse_args()
    cases = [(1000, 64)] if args.quick else [(10000, 256), (2000, 64)]
    rounds = 1 if args.quick else args.rounds
    with recording("colocated", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ngcol_") as tmp, \
            ExitStack() as stacks:
        work = Path(tmp)
        stack = {name: stacks.enter_context(weather_stack(work / name, colocate=colocate))
                 for name, colocate in LAYOUTS.items()}
        for name, running in stack.items():
            run_collector(running, write_rows(work / "warmup.jsonl", 500), work / f"warmup_{name}.jsonl",
                          WEATHER_AGENT, 64)
        runs = []
        for index in range(rounds):
            order = list(LAYOUTS) if index % 2 == 0 else list(reversed(LAYOUTS))
            for rows, concurrency in cases:
                inputs = write_rows(work / f"rows_{rows}.jsonl", rows)
                for name in order:
                    result = run_collector(stack[name], inputs, work / f"{name}_{rows}_{index}.jsonl",
                                           WEATHER_AGENT, concurrency, "+adaptive_concurrency=false")
                    chat = f"{stack[name].model_base_url}/chat/completions"
                    bare, bare_runs = bare_requests_per_s(with_aiohttp, chat, rows, concurrency)
                    run = {"layout": name, "rows": rows, "concurrency": concurrency, "round": index,
                           "rollouts_per_s": result["rollouts_per_s"],
                           "cpu_ms_per_rollout": result["cpu_ms_per_rollout"],
                           "cpu_ms_per_rollout_by_process": result["cpu_ms_per_rollout_by_process"],
                           "bare_aiohttp_requests_per_s": bare, "bare_aiohttp_runs": bare_runs,
                           "stack_vs_bare_same_requests": round(
                               result["rollouts_per_s"] * MODEL_CALLS_PER_ROLLOUT / bare, 3),
                           "load_average": load_average()}
                    print(f"{name:<10} {rows} rows {concurrency} concurrent: {run['rollouts_per_s']:.0f}/s "
                          f"{run['cpu_ms_per_rollout']:.3f} cpu-ms, stack/bare {run['stack_vs_bare_same_requests']}"
                          f"  load {run['load_average']}", flush=True)
                    runs.append(run)
        ratios = {}
        for rows, concurrency in cases:
            apart, colocated = (_of(runs, name, rows, concurrency) for name in LAYOUTS)
            ratios[f"{rows}_rows_{concurrency}_concurrent"] = {
                "rollouts_per_s_colocated_vs_apart": _summary(
                    [c["rollouts_per_s"] / a["rollouts_per_s"] for a, c in zip(apart, colocated)]),
                "cpu_ms_per_rollout_colocated_vs_apart": _summary(
                    [c["cpu_ms_per_rollout"] / a["cpu_ms_per_rollout"] for a, c in zip(apart, colocated)]),
                "stack_vs_bare_same_requests": {
                    name: _summary([run["stack_vs_bare_same_requests"] for run in _of(runs, name, rows, concurrency)])
                    for name in LAYOUTS}}
        stack_name = "collector -> simple_agent -> vllm_model -> instant stub, weather"
        recorder.write(ratios, {"settings": {"cases": cases, "rounds": rounds, "stack": stack_name,
                                             "colocate_servers": LAYOUTS, "bare_runs_per_round": BARE_RUNS},
                                "runs": runs})


if __name__ == "__main__":
    main()
