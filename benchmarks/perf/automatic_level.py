"""The automatic concurrency level against the best fixed one and a direct client, on one real vLLM (CPU build,
SmolLM2-135M-Instruct), side by side.

    .venv/bin/python -m benchmarks.perf.automatic_level [--quick]

Two run lengths: `SHORT` rows (the README's main job: a run too short to measure a level by, which starts with all
its rollouts in flight) and `LONG` rows (long enough that the level is vLLM's to say: it starts at the capacity vLLM
reports and follows its queue, rollout_collection/engine_level.py). For each, in rounds whose order reverses each
time (drift weighs on every setting alike):
- direct: the same Chat Completions requests straight to vLLM, all at once (saturation.py's client);
- fixed N: the full stack (collector -> simple_agent -> vllm_model -> vLLM, weather environment, rows without tools:
  one model call per rollout) with `+adaptive_concurrency=false` and N in flight, for each N in `FIXED`;
- automatic: the same stack with the default automatic level (ceiling 256).
Records each phase's collection time and rate, the automatic level's last reason and vLLM's load as the collector
last read them, and the ratios: automatic over the best fixed setting (goal >= 0.97) and, for the short run, the
direct client's time over the automatic run's (goal >= 1 / 1.05). Writes benchmarks/results/automatic_level.json.
"""

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import orjson

from benchmarks.perf.harness import WEATHER_AGENT, run_collector, weather_stack
from benchmarks.perf.results import load_average, recording
from benchmarks.perf.saturation import direct, rows
from benchmarks.perf.vllm_server import MODEL_NAME, vllm_server
from nemo_gym.run_files.paths import RunPaths

SHORT, LONG = 50, 256
QUICK_LONG = 160
FIXED = (16, 256)
CEILING = 256
MAX_TOKENS = 64
ROUNDS, QUICK_ROUNDS = 2, 1


def stack_phase(stack: Any, rows_path: Path, output: Path, fixed: int | None) -> dict[str, Any]:
    """One collection of `rows_path`: at `fixed` in flight, or automatic (None) below CEILING."""
    extra = ("+adaptive_concurrency=false",) if fixed is not None else ()
    result = run_collector(stack, rows_path, output, WEATHER_AGENT, fixed or CEILING, *extra)
    progress = orjson.loads(RunPaths(output).progress.read_bytes())
    return {"seconds": result["elapsed_s"], "rollouts_per_s": result["rollouts_per_s"],
            "concurrency_at_end": progress["concurrency"], "vllm_load_at_end": progress.get("engine"),
            "load_average": load_average()}


def measure(stack: Any, base_url: str, work: Path, count: int, rounds: int) -> dict[str, Any]:
    batch = rows(count, MAX_TOKENS)
    rows_path = work / f"rows_{count}.jsonl"
    rows_path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in batch))
    settings = ["direct", *(f"fixed {n}" for n in FIXED), "automatic"]
    phases: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    for round_ in range(rounds):
        for name in settings if round_ % 2 == 0 else reversed(settings):
            if name == "direct":
                phase = {**asyncio.run(direct(base_url, batch, count)), "load_average": load_average()}
            else:
                fixed = int(name.split()[1]) if name.startswith("fixed") else None
                phase = stack_phase(stack, rows_path, work / f"{count}_{name.replace(' ', '')}_{round_}.jsonl", fixed)
            phases[name].append(phase)
            print(f"{count} rows, {name}, round {round_}: {phase['seconds']} s  load {phase['load_average']}",
                  flush=True)
    seconds = {name: sum(p["seconds"] for p in runs) / len(runs) for name, runs in phases.items()}
    best_fixed = min((name for name in settings if name.startswith("fixed")), key=lambda name: seconds[name])
    return {"rows": count, "mean_seconds": {name: round(s, 2) for name, s in seconds.items()},
            "best_fixed": best_fixed,
            "automatic_vs_best_fixed": round(seconds[best_fixed] / seconds["automatic"], 3),
            "direct_vs_automatic_time": round(seconds["direct"] / seconds["automatic"], 3), "phases": phases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_LONG} rows for the long run, one round")
    args = parser.parse_args()
    long_rows, rounds = (QUICK_LONG, QUICK_ROUNDS) if args.quick else (LONG, ROUNDS)
    with recording("automatic_level", args.quick) as recorder, \
            tempfile.TemporaryDirectory(prefix="ng_level_") as tmp:
        work = Path(tmp)
        with vllm_server(work) as base_url:
            with weather_stack(work / "stack", model_base_url=base_url, model_name=MODEL_NAME) as stack:
                asyncio.run(direct(base_url, rows(32, MAX_TOKENS), 32))  # warm-up
                runs = {"short": measure(stack, base_url, work, SHORT, rounds),
                        "long": measure(stack, base_url, work, long_rows, rounds)}
        for name, run in runs.items():
            print(f"{name} ({run['rows']} rows): automatic / best fixed ({run['best_fixed']}) "
                  f"{run['automatic_vs_best_fixed']}, direct / automatic time {run['direct_vs_automatic_time']}")
        recorder.write(
            {"short_automatic_vs_best_fixed": runs["short"]["automatic_vs_best_fixed"],
             "long_automatic_vs_best_fixed": runs["long"]["automatic_vs_best_fixed"],
             "short_direct_client_vs_automatic_time": runs["short"]["direct_vs_automatic_time"]},
            {"settings": {"short_rows": SHORT, "long_rows": long_rows, "fixed": list(FIXED), "ceiling": CEILING,
                          "max_tokens": MAX_TOKENS, "rounds": rounds, "agent": WEATHER_AGENT},
             "targets": {"automatic_vs_best_fixed_at_least": 0.97, "direct_vs_automatic_time_at_least": 0.952},
             "load_average_at_end": load_average(), **runs})


if __name__ == "__main__":
    main()
