"""Long runs: what a crash re-bills, with replay of finished model calls and without; what the replay journal costs
on the hot path; and the default concurrency against the best fixed setting on a long stub run.

    .venv/bin/python -m benchmarks.perf.long_runs [--quick]

1. Re-billing. The weather environment (simple_agent + example_single_tool_call + vllm_model, two model calls per
   rollout) in front of the hosted stub (benchmarks/perf/hosted_api_stub.py), which counts the calls it answers: the
   bill. One uninterrupted run, then the same rows with the collector killed by SIGKILL `KILLS` times (each once
   the output holds the next share of the rows), resumed after each kill until complete: with replay on (the
   default) and with +replay_model_calls=false. Reported: the calls billed beyond the uninterrupted run's, against
   the bound (the calls in flight at each kill: at most one per rollout in flight) and against what a restart from
   each interrupted rollout's first turn costs (replay off).
2. The journal on the hot path: the weather environment in front of the instant stub, 10,000 rows at a fixed 256 in
   flight, replay on and off in alternating rounds; CPU per rollout (collector and servers) and rollouts per second.
3. The default concurrency (adaptive, ceiling 256) against the best fixed setting (+adaptive_concurrency=false at 64
   and at 256, the setting it replaced), the same stack and rows, rounds in alternating order (the machine's
   drift falls on each variant alike); medians.
4. Exactly once with replay on: 50,000 rows against the instant stub at 256 in flight, the collector killed by
   SIGKILL 10 times (each once the output holds the next share of the rows) and resumed until complete; every key
   once, every line whole, no journal left.
Writes benchmarks/results/long_runs.json.
"""

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import httpx
import orjson

from benchmarks.perf.chaos import LineCount
from benchmarks.perf.harness import WEATHER_AGENT, WEATHER_CONFIG, _env, ng_run, run_collector, weather_stack, write_rows
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, load_average, recording
from nemo_gym.model_call_replay import journal_path
from nemo_gym.server.supervisor import free_port

STUB = REPO_ROOT / "benchmarks" / "perf" / "hosted_api_stub.py"
MODEL, KEY = "stub", "none"
CALLS_PER_ROLLOUT = 2
FIXED_LEVELS = (64, 256)  # the default's rivals: a level near the stack's knee, and the setting it replaced
FIXED = ("+adaptive_concurrency=false",)  # the journal's rounds too: a level that moves would blur its cost
COLLECT = [sys.executable, "-c", "from nemo_gym.cli.collect import main; main()"]


def _billed(url: str) -> int:
    return httpx.get(f"{url.removesuffix('/v1')}/stats", timeout=10, trust_env=False).json()["completed"]


def _collect_with_kills(workdir: Path, head_url: str, inputs: Path, output: Path, rows: int, in_flight: int,
                        kills: int, replay: bool) -> dict[str, Any]:
    """Collect `inputs`, killing the collector `kills` times (the k-th once the output holds k/(kills+1) of the
    rows), resuming after each until complete; the kills and the runs it took."""
    args = [f"+head_server_url={head_url}", f"+agent_name={WEATHER_AGENT}", f"+input_jsonl_fpath={inputs}",
            f"+output_jsonl_fpath={output}", f"+num_samples_in_parallel={in_flight}", "+adaptive_concurrency=false",
            "+disable_aggregation=true", f"+replay_model_calls={str(replay).lower()}"]
    env = _env()
    killed_at: list[int] = []
    count = LineCount(output)
    for run in range(kills + 1):
        resume = ["+resume_from_cache=true"] if run else []
        with open(workdir / f"collect_{replay}_{run}.log", "wb") as log:
            popen = subprocess.Popen([*COLLECT, *args, *resume], cwd=workdir, env=env, stdout=log, stderr=log)
            try:
                if run < kills:
                    target = (run + 1) * rows // (kills + 1)
                    while count() < target and popen.poll() is None:
                        time.sleep(0.02)
                    if popen.poll() is not None:
                        raise BenchmarkFailed(f"the collector ended before kill {run + 1}: see {log.name}")
                    popen.send_signal(signal.SIGKILL)
                    popen.wait()
                    killed_at.append(count())
                    count = LineCount(output)  # the resume may drop a torn last line: count afresh
                popen.wait(timeout=1800)
            finally:
                if popen.poll() is None:
                    popen.kill()
                    popen.wait()
        if run == kills and popen.returncode != 0:
            raise BenchmarkFailed(f"the last resume exited {popen.returncode}: see {log.name}")
        time.sleep(0.5)  # the orphaned rollouts of a kill finish in their agents (their calls are billed)
    if (written := LineCount(output)()) != rows:
        raise BenchmarkFailed(f"{written} rollouts in the output, not {rows}")
    return {"kills_at_rollouts": killed_at, "runs": kills + 1}


def rebilling(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    stub_port = free_port()
    stub_url = f"http://127.0.0.1:{stub_port}/v1"
    config = {"replay_api": {"responses_api_models": {"hosted_api_stub": {
        "entrypoint": str(STUB), "port": stub_port, "model": MODEL, "api_key": KEY, "requests_per_minute": 1_000_000,
        "tokens_per_minute": 1_000_000_000, "latency_median_s": args.latency_s, "latency_sigma": 0.5}}}}
    policy = (f"+policy_base_url={stub_url}", f"+policy_api_key={KEY}", f"+policy_model_name={MODEL}")
    runs: dict[str, Any] = {}
    with ng_run(workdir / "stack", config, (WEATHER_CONFIG, "configs/vllm_model.yaml"), policy) as stack:
        inputs = write_rows(workdir / "in.jsonl", args.rows, max_output_tokens=16)
        for name, kills, replay in (("uninterrupted", 0, True), ("replay_on", args.kills, True),
                                    ("replay_off", args.kills, False)):
            before = _billed(stub_url)
            found = _collect_with_kills(workdir, stack.head_url, inputs, workdir / f"{name}.jsonl", args.rows,
                                        args.in_flight, kills, replay)
            time.sleep(1.0)  # the last orphans' calls land
            runs[name] = {**found, "billed_calls": _billed(stub_url) - before, "load_average": load_average()}
            print(name, runs[name], flush=True)
    base = runs["uninterrupted"]["billed_calls"]
    bound = args.kills * args.in_flight
    ratios = {
        "extra_calls_replay_on": runs["replay_on"]["billed_calls"] - base,
        "extra_calls_replay_off": runs["replay_off"]["billed_calls"] - base,
        "extra_call_bound_calls_in_flight_at_kills": bound,
        "extra_calls_replay_on_within_bound": runs["replay_on"]["billed_calls"] - base <= bound,
    }
    return {"ratios": ratios, "runs": runs, "rows": args.rows, "in_flight": args.in_flight, "kills": args.kills,
            "stub_latency_median_s": args.latency_s}


def _rounds(stack: Any, workdir: Path, inputs: Path, rounds: int,
            variants: tuple[tuple[str, int, tuple[str, ...]], ...]) -> dict[str, list[dict[str, Any]]]:
    """Each variant (name, in flight, extra settings) once a round, the order reversed every other round."""
    found: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in variants}
    for index in range(rounds):
        for name, in_flight, extra in (variants if index % 2 == 0 else variants[::-1]):
            result = run_collector(stack, inputs, workdir / f"{name}_{index}.jsonl", WEATHER_AGENT, in_flight, *extra)
            found[name].append({"rollouts_per_s": result["rollouts_per_s"],
                                "cpu_ms_per_rollout": result["cpu_ms_per_rollout"], "load_average": load_average()})
            print(name, index, found[name][-1], flush=True)
    return found


def _median(runs: list[dict[str, Any]], field: str) -> float:
    return median(run[field] for run in runs)


def hot_path(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with weather_stack(workdir / "instant") as stack:
        inputs = write_rows(workdir / "hot.jsonl", args.hot_rows)
        run_collector(stack, write_rows(workdir / "warm.jsonl", 500), workdir / "warm_out.jsonl", WEATHER_AGENT, 64)
        journal = _rounds(stack, workdir, inputs, args.rounds,
                          (("replay_on", 256, FIXED), ("replay_off", 256, (*FIXED, "+replay_model_calls=false"))))
        level = _rounds(stack, workdir, inputs, args.rounds, (("default", 256, ()),) + tuple(
            (f"fixed_{n}", n, FIXED) for n in FIXED_LEVELS))
    best = max((f"fixed_{n}" for n in FIXED_LEVELS), key=lambda name: _median(level[name], "rollouts_per_s"))
    ratios = {
        "journal_cpu_per_rollout_on_vs_off": round(_median(journal["replay_on"], "cpu_ms_per_rollout")
                                                   / _median(journal["replay_off"], "cpu_ms_per_rollout"), 3),
        "journal_rate_on_vs_off": round(_median(journal["replay_on"], "rollouts_per_s")
                                        / _median(journal["replay_off"], "rollouts_per_s"), 3),
        "best_fixed": best,
        "default_vs_best_fixed_rate": round(_median(level["default"], "rollouts_per_s")
                                            / _median(level[best], "rollouts_per_s"), 3),
    }
    return {"ratios": ratios, "journal_rounds": journal, "level_rounds": level, "rows": args.hot_rows}


def exactly_once(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    output = workdir / "once.jsonl"
    with weather_stack(workdir / "once_stack") as stack:
        inputs = write_rows(workdir / "once_in.jsonl", args.once_rows)
        started = time.monotonic()
        found = _collect_with_kills(workdir, stack.head_url, inputs, output, args.once_rows, 256, args.once_kills,
                                    replay=True)
        elapsed = time.monotonic() - started
    keys, torn = [], 0
    for line in output.read_bytes().splitlines():
        try:
            row = orjson.loads(line)
            keys.append((row["_ng_task_index"], row["_ng_rollout_index"]))
        except orjson.JSONDecodeError:
            torn += 1
    journal = journal_path(output)
    ratios = {"lost": args.once_rows - len(set(keys)), "duplicated": len(keys) - len(set(keys)), "torn_lines": torn,
              "journal_left_bytes": journal.stat().st_size if journal.exists() else 0}
    return {"ratios": ratios, **found, "rows": args.once_rows, "elapsed_s": round(elapsed, 1),
            "load_average": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run (results under benchmarks/results/quick)")
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--latency-s", type=float, default=0.1, help="the stub's median answer time")
    parser.add_argument("--hot-rows", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--once-rows", type=int, default=50_000)
    parser.add_argument("--once-kills", type=int, default=10)
    args = parser.parse_args()
    if args.quick:
        args.rows, args.kills, args.hot_rows, args.rounds, args.once_rows, args.once_kills = 120, 2, 1000, 1, 2000, 3
    with recording("long_runs", quick=args.quick) as recorder, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        billing = rebilling(args, workdir)
        hot = hot_path(args, workdir)
        once = exactly_once(args, workdir)
        recorder.write({"rebilling": billing.pop("ratios"), "hot_path": hot.pop("ratios"),
                        "exactly_once": once.pop("ratios")}, {"rebilling": billing, "hot_path": hot,
                                                              "exactly_once": once})


if __name__ == "__main__":
    main()
