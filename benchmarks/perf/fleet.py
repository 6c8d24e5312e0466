"""Fleet benchmark: how full a fleet of simulated vLLM replicas (Llama-3.1-8B on one H100 each,
benchmarks/fleet/profile.py) stays under our collector, and what our stack's CPU costs at the fleet's rate.

    python -m benchmarks.perf.fleet [--quick]

Part 1, in simulated time (benchmarks/fleet/inprocess.py: the collector's AdaptiveLimit with ThroughputKnee or a fixed
level, vllm_model's ReplicaRouter and simulated replicas in one process; the same numbers on any machine):
- on 1, 8 and 32 replicas, single-turn and multi-turn rows: rollouts/s, slot utilization and the prefix-cache hit
  rate with 256 in flight (the old default), with the best of a sweep of fixed levels, and with the automatic level:
  by the throughput knee (a hosted endpoint's), and from vLLM's own signals (the replicas' running, waiting, KV
  cache and preemptions read every 2 s, as vllm_model's GET /engine_load reports them; max_model_len 8192);
- 8 replicas, multi-turn: hash routing against load-aware routing, all replicas equal and one 2x slower;
- 8 replicas, multi-turn, automatic level: one replica killed at 40% of the run and back at 60%: every rollout
  collected exactly once, and the utilization over time (docs/img/fleet_utilization.png).
Part 2, on the wall clock: the real stack (ng_collect_rollouts -> simple_agent -> weather environment -> vllm_model
-> simulated replicas over HTTP in a process of their own, time-scaled) with multi-turn rows at each fleet's
automatic level (at most STACK_MAX_IN_FLIGHT): our processes' CPU per rollout (the fleet process excluded), i.e. the
cores per 1,000 rollouts/s, and the cores each fleet needs at its own rate.
Writes benchmarks/results/fleet.json.
"""

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.fleet.__main__ import DEFAULT_MODEL
from benchmarks.fleet.inprocess import FleetResult, FleetSetup, run_fleet
from benchmarks.fleet.profile import H100_LLAMA_8B
from benchmarks.fleet.stack import fleet_process, write_fleet_rows
from benchmarks.fleet.workload import MULTI_TURN, SINGLE_TURN, Workload
from benchmarks.perf.harness import WEATHER_AGENT, run_collector, weather_stack
from benchmarks.perf.plots import pyplot, save
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, recording
from nemo_gym.responses_api_models.vllm_model.routing import RoutingMode

FIGURE = REPO_ROOT / "docs" / "img" / "fleet_utilization.png"
REPLICAS = (1, 8, 32)
WORKLOADS = (SINGLE_TURN, MULTI_TURN)
SWEEP = (0.75, 1.0, 1.25, 1.5)  # fixed levels, as shares of the fleet's sequence slots
OLD_DEFAULT = 256
FIXED_S = 300.0  # a fixed level's run; the second half is measured
AUTO_S = 900.0  # the automatic level's run: its climb, then the measured last 40%
AUTO_MEASURED = 0.4
ROUTING_REPLICAS = 8
KILL_SETTLE_S = 60.0  # the failover run's windows start this long after a change
ROUTING_S = 600.0  # hash routing's queue at a slow replica takes minutes to build: measure its second half
STACK_RATE = 80.0  # rollouts/s the stack part's time scale makes the simulated fleet answer (about what 2 cores drive)
STACK_ROWS = 1.5  # rows per stack run, in units of its rows in flight
# Rows in flight in the stack runs at most: a burst of more new connections than a listening socket's backlog
# (somaxconn, 4,096 here) to one agent process fails to connect; the CPU per rollout hardly depends on the level.
STACK_MAX_IN_FLIGHT = 3000


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _summary(result: FleetResult, setting: str) -> dict[str, Any]:
    setup = result.setup
    return {"replicas": setup.replicas, "workload": setup.workload.name, "setting": setting,
            "routing": setup.routing, "slow": [list(s) for s in setup.slow], "level": result.final_level,
            "rollouts_per_s": _round(result.rollouts_per_s), "output_tokens_per_s": _round(result.output_tokens_per_s),
            "utilization": _round(result.utilization), "prefix_hit_rate": _round(result.prefix_hit_rate),
            "mean_waiting": _round(result.mean_waiting), "window_s": list(result.window_s),
            "hold_from_s": result.hold_from_s, "started": result.started, "succeeded": result.succeeded,
            "failed": result.failed, "duplicates": result.duplicates, "retried": result.retried,
            "moved": result.moved}


def _run(setup: FleetSetup, setting: str) -> tuple[FleetResult, dict[str, Any]]:
    started = time.process_time()
    result = run_fleet(setup)
    summary = _summary(result, setting)
    summary["cpu_s"] = round(time.process_time() - started, 2)
    print(f"{setup.replicas:>2} replicas {setup.workload.name:<11} {setting:<22} level {result.final_level:>6}: "
          f"{result.rollouts_per_s:8.2f} rollouts/s, utilization {result.utilization:.3f}, prefix hits "
          f"{result.prefix_hit_rate:.3f} ({summary['cpu_s']} s CPU)", flush=True)
    return result, summary


def utilization_rows(quick: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, FleetResult]]:
    """Per fleet and workload: the old default, a sweep of fixed levels (its best kept), the automatic level."""
    table, sweeps, autos = [], [], {}
    for replicas in (REPLICAS[:2] if quick else REPLICAS):
        slots = replicas * H100_LLAMA_8B.max_num_seqs
        for workload in WORKLOADS:
            fixed_s, auto_s = (FIXED_S / 2, AUTO_S / 2) if quick else (FIXED_S, AUTO_S)
            base = FleetSetup(replicas=replicas, workload=workload, duration_s=fixed_s)
            _, old = _run(replace(base, concurrency=OLD_DEFAULT), f"fixed {OLD_DEFAULT}")
            points = [_run(replace(base, concurrency=round(share * slots)), f"sweep {share}x slots")[1]
                      for share in SWEEP]
            sweeps.extend(points)
            best = max([old, *points], key=lambda point: point["rollouts_per_s"])
            auto, auto_summary = _run(replace(base, duration_s=auto_s,
                                              measure_from_s=auto_s * (1 - AUTO_MEASURED)), "automatic")
            autos[f"{replicas}/{workload.name}"] = auto
            if auto.hold_from_s is None or auto.hold_from_s > auto_s * (1 - AUTO_MEASURED):
                auto_summary["note"] = "the automatic level had not settled when the measured window began"
            auto_summary["knee_points"] = auto.knee_points
            _, engine_summary = _run(replace(base, duration_s=auto_s, measure_from_s=auto_s * (1 - AUTO_MEASURED),
                                             policy="engine"), "automatic from vLLM")
            table.extend([old, {**best, "setting": f"best fixed ({best['level']})"}, auto_summary, engine_summary])
    return table, sweeps, autos


def routing_rows(quick: bool) -> list[dict[str, Any]]:
    """Hash against load-aware routing, all replicas equal and one 2x slower, at the fleet's slots in flight."""
    rows = []
    slots = ROUTING_REPLICAS * H100_LLAMA_8B.max_num_seqs
    modes: tuple[RoutingMode, ...] = ("hash", "load_aware")
    for slow in ((), ((0, 2.0),)):
        for routing in modes:
            setup = FleetSetup(replicas=ROUTING_REPLICAS, workload=MULTI_TURN, concurrency=slots, routing=routing,
                               duration_s=ROUTING_S / (2 if quick else 1), slow=slow)
            rows.append(_run(setup, f"{routing}{' one 2x slower' if slow else ''}")[1])
    return rows


def failover_run(quick: bool) -> tuple[dict[str, Any], FleetResult]:
    duration = AUTO_S / (2 if quick else 1)
    killed_at, back_at = 0.5 * duration, 0.7 * duration
    setup = FleetSetup(replicas=ROUTING_REPLICAS, workload=MULTI_TURN, duration_s=duration,
                       kill=(3, killed_at, back_at), measure_from_s=back_at + KILL_SETTLE_S)
    result, summary = _run(setup, "automatic, one killed")
    summary["exactly_once"] = result.duplicates == 0 and result.failed == 0
    summary["in_flight_at_end"] = result.started - result.succeeded - result.failed
    summary["killed"] = {"replica": 3, "at_s": killed_at, "back_at_s": back_at}
    summary["utilization_before"] = _mean(result, killed_at - KILL_SETTLE_S, killed_at, "utilization")
    summary["utilization_while_down"] = _mean(result, killed_at, back_at, "utilization")
    summary["rollouts_per_s_before"] = _mean(result, killed_at - KILL_SETTLE_S, killed_at, "rollouts_per_s")
    summary["rollouts_per_s_while_down"] = _mean(result, killed_at, back_at, "rollouts_per_s")
    return summary, result


def _mean(result: FleetResult, start: float, end: float, field: str) -> float:
    """The mean of a sampled figure over the samples that end within (start, end]."""
    values = [float(getattr(sample, field)) for sample in result.samples if start < sample.t <= end]
    return round(sum(values) / len(values), 4)


def _plot(autos: dict[str, FleetResult], failover: FleetResult, png: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for key, result in autos.items():
        if key.startswith(f"{ROUTING_REPLICAS}/"):
            axes[0].plot([s.t for s in result.samples], [s.utilization for s in result.samples], label=key)
    axes[0].set_title(f"{ROUTING_REPLICAS} replicas, automatic level from 16")
    axes[1].plot([s.t for s in failover.samples], [s.utilization for s in failover.samples], label="utilization")
    kill = failover.setup.kill
    assert kill is not None
    axes[1].axvspan(kill[1], kill[2], color="grey", alpha=0.2, label=f"replica {kill[0]} down")
    axes[1].set_title(f"{ROUTING_REPLICAS} replicas, multi-turn, one killed and back")
    for ax in axes:
        ax.set_xlabel("simulated seconds")
        ax.set_ylim(0, 1.05)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("occupied sequence slots / all slots")
    save(fig, png)


def stack_cpu(autos: dict[str, FleetResult], quick: bool, work: Path) -> list[dict[str, Any]]:
    """Our stack's CPU per rollout in front of each fleet, at that fleet's automatic level (multi-turn rows)."""
    rows = []
    for replicas in (REPLICAS[:2] if quick else REPLICAS):
        auto = autos[f"{replicas}/{MULTI_TURN.name}"]
        in_flight = min(auto.final_level, STACK_MAX_IN_FLIGHT)
        fleet_rate = auto.rollouts_per_s
        scale = STACK_RATE / fleet_rate
        rollouts = max(512, round(STACK_ROWS * in_flight))
        folder = work / f"stack_{replicas}"
        rows_path = write_fleet_rows(folder / "rows.jsonl", rollouts, MULTI_TURN)
        with fleet_process(folder / "fleet", replicas, scale, MULTI_TURN) as fleet:
            urls = "[" + ",".join(fleet.base_urls) + "]"
            with weather_stack(folder / "stack", model_base_url=urls, model_name=DEFAULT_MODEL) as stack:
                result = run_collector(stack, rows_path, folder / "rollouts.jsonl", WEATHER_AGENT, in_flight,
                                       "+adaptive_concurrency=false")
            lag = [replica["lag_s"] / max(1, replica["lagged"]) for replica in fleet.stats()]
        cpu_ms = result["cpu_ms_per_rollout"]
        row = {"replicas": replicas, "automatic_level": auto.final_level, "rows_in_flight": in_flight,
               "rollouts": rollouts, "time_scale": round(scale, 4),
               "stack_rollouts_per_s": result["rollouts_per_s"], "cpu_ms_per_rollout": cpu_ms,
               "cpu_ms_per_rollout_by_process": result["cpu_ms_per_rollout_by_process"],
               "cores_per_1000_rollouts_per_s": round(cpu_ms, 2),
               "fleet_rollouts_per_s": round(fleet_rate, 2),
               "cores_for_this_fleet": round(cpu_ms * fleet_rate / 1000, 2),
               "fleet_answer_lag_s": round(max(lag), 4)}
        print(f"stack at {in_flight} in flight ({replicas} replicas, time scale {scale:.3f}): {cpu_ms:.2f} ms CPU per "
              f"rollout -> {row['cores_for_this_fleet']} cores at the fleet's {fleet_rate:.1f} rollouts/s", flush=True)
        rows.append(row)
    return rows


def _ratios(table: list[dict[str, Any]], routing: list[dict[str, Any]], failover: dict[str, Any]) -> dict[str, Any]:
    ratios: dict[str, Any] = {}
    for replicas in REPLICAS:
        for workload in WORKLOADS:
            rows = {row["setting"].split(" (")[0]: row for row in table
                    if row["replicas"] == replicas and row["workload"] == workload.name}
            if rows:
                key = f"{replicas}_{workload.name}"
                ratios[f"automatic_vs_best_fixed_{key}"] = round(
                    rows["automatic"]["rollouts_per_s"] / rows["best fixed"]["rollouts_per_s"], 3)
                ratios[f"automatic_utilization_{key}"] = rows["automatic"]["utilization"]
                ratios[f"automatic_from_vllm_vs_best_fixed_{key}"] = round(
                    rows["automatic from vLLM"]["rollouts_per_s"] / rows["best fixed"]["rollouts_per_s"], 3)
                ratios[f"automatic_vs_fixed_256_{key}"] = round(
                    rows["automatic"]["rollouts_per_s"] / rows[f"fixed {OLD_DEFAULT}"]["rollouts_per_s"], 3)
    by = {row["setting"]: row for row in routing}
    ratios["load_aware_vs_hash_one_slower"] = round(
        by["load_aware one 2x slower"]["rollouts_per_s"] / by["hash one 2x slower"]["rollouts_per_s"], 3)
    ratios["load_aware_vs_hash_all_equal"] = round(by["load_aware"]["rollouts_per_s"] / by["hash"]["rollouts_per_s"], 3)
    ratios["prefix_hits_load_aware_vs_hash_all_equal"] = round(
        by["load_aware"]["prefix_hit_rate"] / by["hash"]["prefix_hit_rate"], 3)
    ratios["prefix_hits_load_aware_vs_hash_one_slower"] = round(
        by["load_aware one 2x slower"]["prefix_hit_rate"] / by["hash one 2x slower"]["prefix_hit_rate"], 3)
    ratios["killed_replica_exactly_once"] = failover["exactly_once"]
    return ratios


def _workload_dict(workload: Workload) -> dict[str, Any]:
    return {**vars(workload), "mean_output_tokens": round(workload.mean_output_tokens(), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 and 8 replicas, half-length runs")
    parser.add_argument("--no-stack", action="store_true", help="part 1 only (no HTTP stack, no CPU figures)")
    args = parser.parse_args()
    with recording("fleet", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ng_fleet_") as tmp:
        table, sweeps, autos = utilization_rows(args.quick)
        routing = routing_rows(args.quick)
        failover, failover_result = failover_run(args.quick)
        if not failover["exactly_once"]:
            raise BenchmarkFailed(f"the killed replica cost rollouts: {failover}")
        _plot(autos, failover_result, FIGURE if not args.quick else Path(tmp) / "fleet.png")
        cpu = [] if args.no_stack else stack_cpu(autos, args.quick, Path(tmp))
        recorder.write(_ratios(table, routing, failover), {
            "settings": {"profile": vars(H100_LLAMA_8B), "workloads": [_workload_dict(w) for w in WORKLOADS],
                         "fixed_run_s": FIXED_S, "automatic_run_s": AUTO_S, "routing_run_s": ROUTING_S,
                         "sweep_shares_of_slots": list(SWEEP), "stack_rate": STACK_RATE, "quick": args.quick},
            "utilization": table, "sweeps": sweeps, "routing": routing, "failover": failover, "cpu": cpu,
            "samples": {"automatic": {key: [vars(s) for s in result.samples] for key, result in autos.items()
                                      if key.startswith(f"{ROUTING_REPLICAS}/")},
                        "failover": [vars(s) for s in failover_result.samples]},
            "figure": str(FIGURE.relative_to(REPO_ROOT)),
        })


if __name__ == "__main__":
    main()
