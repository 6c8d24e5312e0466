"""Every performance benchmark in one command; each writes benchmarks/results/<name>.json.

    python -m benchmarks.perf                        # all of them, in the order below (the vLLM ones take long)
    python -m benchmarks.perf collector aggregate    # a subset
    python -m benchmarks.perf --quick                # smoke runs, written to benchmarks/results/quick/
    python -m benchmarks.perf --list                 # names and what each measures
    python -m benchmarks.perf --vllm-url URL ...     # experience, async_collector, benchmark_runs, grpo_learning use it

Each benchmark runs as `python -m benchmarks.perf.<name>` in a child process; a failed one is reported and the
rest still run (exit status 1 at the end). Then `python -m benchmarks.perf.readme_figures --write` puts the new
figures into README.md and docs/.
"""

import argparse
import json
import sys
import time

from benchmarks.perf.lifecycle import child_process, exit_on_signals
from benchmarks.perf.results import REPO_ROOT, results_path

# name -> (what it measures against what, takes --vllm-url)
BENCHMARKS: dict[str, tuple[str, bool]] = {
    "collector": ("full stack on an instant model: rollouts/s at 64/256/1024 concurrent, collector peak RSS "
                  "10k vs 200k rows and 10k vs 1M rows, resume scan", False),
    "agent_workers": ("full stack on an instant model: the agent and the model server with 2 (or more) worker "
                      "processes vs 1, rollouts/s and CPU-ms per rollout of each server", False),
    "colocated": ("full stack on an instant model: ng_run's servers in one process (+colocate_servers=true) vs one "
                  "process each, rollouts/s, CPU-ms per rollout, stack vs a bare client", False),
    "cpu_profile": ("full stack on an instant model at 64/256/1024 in flight: CPU-ms per rollout of each process "
                    "and, with py-spy, by library", False),
    "viewer": ("ng_view on 10k and 1M rows: time to the first page on first open and reopen, peak RSS", False),
    "aggregate": ("aggregation time and peak RSS, 100k vs 1M rollouts, one file vs 4 shards", False),
    "http_clients": ("agent->model call at 1024 concurrent: aiohttp (ours) vs httpx", False),
    "nemo_gym_reference": ("NeMo Gym 0.4.0 vs nemo_gym on the same stub model, environment, rows, concurrency", False),
    "hosted_api": ("NeMo Gym 0.4.0 vs nemo_gym against a rate-limited stub hosted API (429 + Retry-After, lognormal "
                   "latencies): goodput over the allowed rate, 429s and requests per rollout, a wrong model name",
                   False),
    "main_command": ("the README's main command (vLLM start + collection + stop), wall time", False),
    "saturation": ("real vLLM: full stack vs a direct client, same requests (its own vLLM)", False),
    "automatic_level": ("real vLLM: the automatic concurrency level vs fixed levels and a direct client, a 50-row "
                        "run and a longer one (its own vLLM)", False),
    "fleet": ("simulated H100 vLLM replicas (1, 8, 32): slot utilization at 256 in flight, the best fixed level and the "
              "automatic level; hash vs load-aware routing; a replica killed mid-run; our CPU per rollout", False),
    "chaos": ("8 simulated vLLM replicas, one or two faulty (5xx, hang, 10x slow, invalid JSON, reset, killed): every "
              "rollout exactly once, failed rollouts, time to eject, throughput vs the healthy replicas alone; a hosted "
              "endpoint whose quota runs out: time to a clean stop", False),
    "sick_replica": ("real vLLM beside a replica answering 502 at once: rollouts collected and failed, requests the "
                     "sick one got, throughput vs the healthy replica alone", True),
    "long_runs": ("kill -9 three times over a multi-turn run against a billing hosted stub: calls billed beyond an "
                  "uninterrupted run, replay on and off; the replay journal's CPU per rollout; the default level vs "
                  "fixed 256 on 10k stub rows", False),
    "ifeval_agreement": ("instruction_following vs IFEval's own checkers (lm-eval's ifeval task) over a corpus of "
                         "2,000+ triples: agreement per kind", False),
    "multiple_choice_extraction": ("multiple_choice's answer reading vs a hand-labelled corpus: agreement, answers "
                                   "read as another letter, CPU per answer", False),
    "experience": ("real vLLM: per-sample vs batched turns; experience layer vs a direct client", True),
    "async_collector": ("real vLLM: asynchronous vs synchronous generate-then-train", True),
    "benchmark_runs": ("real vLLM: arithmetic and humaneval rewards, collection time", True),
    "environment_runs": ("real vLLM: multiple_choice, instruction_following and judge rewards, the judge on the "
                         "same vLLM", True),
    "weight_push": ("real vLLM per model: a weight push over the disk transport (write + reload) vs the gloo "
                    "transport (tensors over a process group), bundled model and two larger Llamas from a config",
                    False),
    "grpo_learning": ("real vLLM + the example GRPO trainer: held-out arithmetic reward before and after N steps, "
                      "weight push cost", True),
    "grpo_off_policy": ("real vLLM + the example GRPO trainer: reward per step at max trajectory age 0, 1 and 2, "
                        "with and without truncated importance sampling, against a seed-only noise run", False),
    "grpo_async_vs_sync": ("real vLLM + the example GRPO trainer: asynchronous vs synchronous per-step time, vLLM and "
                           "trainer on cores of their own (and synchronous on shared cores), idle shares", False),
    "grpo_vs_trl": ("real vLLM + the example GRPO trainer vs TRL's GRPOTrainer (.venv-trl): time to TRL's final "
                    "reward, same model, rows, reward, settings and wall budget", False),
}


def _summary(name: str, quick: bool) -> str:
    path = results_path(name, quick)
    if not path.exists():
        return "no results file"
    report = json.loads(path.read_text())
    return f"{report['status']}, ratios {json.dumps(report.get('ratios', {}))}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="small sizes, results under benchmarks/results/quick/")
    parser.add_argument("--vllm-url", help="a vLLM serving the bundled model, for the benchmarks that can share one")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args()
    if args.list:
        for name, (what, _) in BENCHMARKS.items():
            print(f"{name:<20} {what}")
        return 0
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    exit_on_signals()
    outcomes: dict[str, int] = {}
    for name in args.names or list(BENCHMARKS):
        command = [sys.executable, "-m", f"benchmarks.perf.{name}", *(["--quick"] if args.quick else [])]
        if args.vllm_url and BENCHMARKS[name][1]:
            command += ["--vllm-url", args.vllm_url]
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        started = time.monotonic()
        # The benchmark stops its own children on SIGTERM; the grace covers a vLLM shutdown.
        with child_process(command, cwd=REPO_ROOT, grace_s=120) as popen:
            outcomes[name] = popen.wait()
        print(f"== {name}: exit {outcomes[name]} after {time.monotonic() - started:.0f} s", flush=True)
    print("\nbenchmark            outcome")
    for name, code in outcomes.items():
        print(f"{name:<20} {'exit ' + str(code) if code else _summary(name, args.quick)}")
    return 1 if any(outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
