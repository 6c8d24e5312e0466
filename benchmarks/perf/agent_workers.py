"""One process per server against several: the full stack (collector -> simple_agent -> vllm_model -> instant stub
chat model, weather environment) with the `workers` setting of its stateless servers (the agent and the model
server) at 1, 2, ... processes, every stack up at once and the rounds taken in turn, in one run.

    .venv/bin/python -m benchmarks.perf.agent_workers [--workers 1,2] [--rows 4000] [--concurrency 256] [--rounds 2]

Per setting: rollouts/s, CPU-ms per rollout of the whole stack (collector and every server) and of each server, and
the CPU-ms of each agent process (the agent is the hottest process of the stack: the one more workers relieve). How
much more workers can give depends on free cores: the results file records the core count, and on a machine with
fewer cores than the stack has busy processes the stack's other processes compete for the same cores.
Writes benchmarks/results/agent_workers.json.
"""

import argparse
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.perf.harness import WEATHER_AGENT, Stack, process_cpu_s, run_collector, weather_stack, write_rows
from benchmarks.perf.results import load_average, recording

# The stack's stateless servers: the agent, and the model server in front of the stub.
WORKERS_KEYS = (f"{WEATHER_AGENT}.responses_api_agents.simple_agent.workers",
                "policy_model.responses_api_models.vllm_model.workers")


def agent_cpu_s(stack: Stack) -> dict[int, float]:
    """CPU seconds so far of each process serving the weather agent (its launcher and its workers), by pid."""
    return {pid: cpu_s for pid, name in stack.server_pids().items()
            if name == WEATHER_AGENT and (cpu_s := process_cpu_s(pid)) is not None}


def measure_round(stack: Stack, work: Path, workers: int, index: int, inputs: Path,
                  concurrency: int) -> dict[str, Any]:
    before = agent_cpu_s(stack)
    load = load_average()
    result = run_collector(stack, inputs, work / f"out_{workers}_{index}.jsonl", WEATHER_AGENT, concurrency)
    after = agent_cpu_s(stack)
    rollouts = result["succeeded"]
    per_process = sorted(1000 * (after[pid] - before.get(pid, 0.0)) / rollouts for pid in after)
    run = {"rollouts_per_s": result["rollouts_per_s"], "cpu_ms_per_rollout": result["cpu_ms_per_rollout"],
           "agent_cpu_ms_per_rollout_by_process": [round(ms, 3) for ms in per_process],
           "agent_share_of_cpu": round(sum(per_process) / result["cpu_ms_per_rollout"], 3),
           "cpu_ms_per_rollout_by_server": result["cpu_ms_per_rollout_by_process"],
           "rollouts": rollouts, "load_average_at_start": load, "load_average_at_end": load_average()}
    print(f"workers {workers}, round {index}: {result['rollouts_per_s']:.0f}/s, {result['cpu_ms_per_rollout']:.2f} "
          f"cpu-ms/rollout, agent processes {run['agent_cpu_ms_per_rollout_by_process']} cpu-ms/rollout, load {load}",
          flush=True)
    return run


def measure(work: Path, counts: list[int], inputs: Path, concurrency: int, rounds: int) -> list[dict[str, Any]]:
    """Every setting's stack up at once, and the rounds taken in turn (1, 2, 1, 2, ...): a machine whose speed
    drifts during the run (a shared host) then skews every setting alike."""
    runs: dict[int, list[dict[str, Any]]] = {workers: [] for workers in counts}
    with ExitStack() as stacks:
        started = {}
        for workers in counts:
            overrides = tuple(f"+{key}={workers}" for key in WORKERS_KEYS)
            stack = started[workers] = stacks.enter_context(weather_stack(work / f"stack_{workers}",
                                                                          overrides=overrides))
            run_collector(stack, write_rows(work / "warmup.jsonl", 500), work / f"warmup_{workers}.jsonl",
                          WEATHER_AGENT, 64)
        for index in range(rounds):
            for workers in counts:
                runs[workers].append(measure_round(started[workers], work, workers, index, inputs, concurrency))
    return [{"workers": workers, "runs": runs[workers],
             "best_rollouts_per_s": max(run["rollouts_per_s"] for run in runs[workers])} for workers in counts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="worker counts to measure, the first is the baseline")
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2, help="collections per setting (the best one counts)")
    parser.add_argument("--quick", action="store_true", help="500 rows, one round, results under quick/")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 500, 1
    with recording("agent_workers", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ng_workers_") as tmp:
        work = Path(tmp)
        inputs = write_rows(work / "weather.jsonl", args.rows)
        counts = [int(n) for n in args.workers.split(",")]
        settings = measure(work, counts, inputs, args.concurrency, args.rounds)
        base = settings[0]["best_rollouts_per_s"]
        ratios = {f"{s['workers']}_workers_over_{counts[0]}": round(s["best_rollouts_per_s"] / base, 3)
                  for s in settings[1:]}
        print(", ".join(f"{key}: {ratio}x rollouts/s" for key, ratio in ratios.items()), flush=True)
        recorder.write(ratios,
                       {"settings": {"workers": counts, "rows": args.rows, "concurrency": args.concurrency,
                                     "rounds": args.rounds, "servers_with_workers": list(WORKERS_KEYS),
                                     "stack": "collector -> simple_agent -> vllm_model -> instant stub, weather"},
                        "by_workers": settings})


if __name__ == "__main__":
    main()
