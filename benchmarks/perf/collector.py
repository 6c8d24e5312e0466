"""The collector against an instant model: throughput, peak RSS by row count, resume scan. Writes
benchmarks/results/collector.json.

    .venv/bin/python -m benchmarks.perf.collector            # all of it
    .venv/bin/python -m benchmarks.perf.collector --quick    # smaller row counts, no 1M run

Measured: (1) orchestration throughput of the full stack (collector -> simple_agent -> vllm_model -> instant stub chat
model, weather environment) at 64/256/1024 concurrent, each beside a bare client in this process (ours, then
aiohttp's) posting a chat request straight to the same stub as many times at the same concurrency (the median of three
runs each: http_clients.bare_requests_per_s). A rollout asks the model twice, so the bare client sends the stack's
requests to the stub in twice its time per request: `stack_vs_bare_same_requests` is the stack's rollouts/s over half
the bare client's requests/s (1.0: the stack costs nothing beyond the model's requests), `stack_vs_bare_client` over
all of it; also 2,000 rows at 64; (2) collector peak RSS at 10k/200k rows on the full stack and at 10k/1M rows on the
tests' instant agent; (3) resume scan time of the output file; (4) CPU per rollout at 1k/10k/100k rows on the full
stack at 256 concurrent: every process's CPU over the run, less a run's fixed cost (the CPU of a run of one row, every
process's: the collector's imports, config and preflight among it), per rollout beyond the first, so that a cost
growing with the run's length shows. Ratios: each concurrency against 64, the largest row count's peak RSS (and CPU
per rollout) against the smallest's. Never run by the test suite.
"""

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.perf.harness import WEATHER_AGENT, instant_agent_stack, run_collector, weather_stack, write_rows
from benchmarks.perf.http_clients import bare_requests_per_s, with_aiohttp, with_nemo_gym
from benchmarks.perf.results import best_by_concurrency, load_average, recording
from nemo_gym.rollout_collection.store import scan_done


# The stack's ceiling, measured two ways: with our client (the stub's own limit) and with aiohttp's (the bare
# client of the figures taken before nemo_gym.http_wire).
BARE_CLIENTS = {"nemo_gym": with_nemo_gym, "aiohttp": with_aiohttp}
MODEL_CALLS_PER_ROLLOUT = 2  # the weather rollout: a tool call, then the answer
SHORT_CASE = (2000, 64)  # rows, concurrency


def _row(name: str, figure: str, detail: dict[str, Any]) -> dict[str, Any]:
    entry = {"benchmark": name, "figure": figure, "load_average": load_average(), **detail}
    print(f"{name:<40} {figure:>24}   load {entry['load_average']}", flush=True)
    return entry


def throughput(work: Path, rows: int, concurrencies: list[int], rounds: int) -> list[dict[str, Any]]:
    """Each round runs every concurrency in turn (64, 256, 1024, 64, ...): a machine whose speed drifts during the
    run then skews them alike."""
    work = work / f"throughput_{rows}_{'_'.join(map(str, concurrencies))}"
    work.mkdir()
    inputs = write_rows(work / "weather.jsonl", rows)
    out = []
    with weather_stack(work / "weather_stack") as stack:
        run_collector(stack, write_rows(work / "warmup.jsonl", 500), work / "warmup_out.jsonl", WEATHER_AGENT, 64)
        for index in range(rounds):
            for concurrency in concurrencies:
                output = work / f"tp_{concurrency}_{index}.jsonl"
                result = run_collector(stack, inputs, output, WEATHER_AGENT, concurrency)
                chat = f"{stack.model_base_url}/chat/completions"
                measured = {name: bare_requests_per_s(client, chat, rows, concurrency)
                            for name, client in BARE_CLIENTS.items()}
                bare = {name: rate for name, (rate, _) in measured.items()}
                out.append(_row(f"full stack, {concurrency} concurrent, {rows} rows",
                                f"{result['rollouts_per_s']:.0f}/s {result['cpu_ms_per_rollout']:.2f} cpu-ms",
                                {"concurrency": concurrency, "round": index, **result,
                                 "bare_client_requests_per_s": bare,
                                 "bare_client_runs": {name: runs for name, (_, runs) in measured.items()},
                                 "stack_vs_bare_client": {name: round(result["rollouts_per_s"] / rate, 3)
                                                          for name, rate in bare.items()},
                                 "stack_vs_bare_same_requests": {
                                     name: round(result["rollouts_per_s"] * MODEL_CALLS_PER_ROLLOUT / rate, 3)
                                     for name, rate in bare.items()}}))
    return out


def full_stack_rss(work: Path, row_counts: list[int], concurrency: int = 256) -> list[dict[str, Any]]:
    out = []
    with weather_stack(work / "rss_stack") as stack:
        for rows in row_counts:
            inputs = write_rows(work / f"rss_{rows}.jsonl", rows)
            result = run_collector(stack, inputs, work / f"rss_out_{rows}.jsonl", WEATHER_AGENT, concurrency)
            out.append(_row(f"collector peak RSS, full stack, {rows} rows", f"{result['peak_rss_mb']:.0f} MB",
                            {"rows": rows, "concurrency": concurrency, **result}))
            inputs.unlink()
    return out


def cpu_by_rows(work: Path, row_counts: list[int], concurrency: int = 256) -> list[dict[str, Any]]:
    out = []
    with weather_stack(work / "cpu_stack") as stack:
        # One rollout: the whole run's CPU, every process's, is what a run costs beyond its rollouts (and one).
        fixed_ms = run_collector(stack, write_rows(work / "one.jsonl", 1), work / "one_out.jsonl", WEATHER_AGENT,
                                 1)["cpu_ms_per_rollout"]
        for rows in row_counts:
            inputs = write_rows(work / f"cpu_{rows}.jsonl", rows)
            result = run_collector(stack, inputs, work / f"cpu_out_{rows}.jsonl", WEATHER_AGENT, concurrency)
            per_rollout = (result["cpu_ms_per_rollout"] * rows - fixed_ms) / (rows - 1)
            out.append(_row(f"CPU per rollout, {rows} rows", f"{per_rollout:.3f} cpu-ms",
                            {"rows": rows, "concurrency": concurrency, "fixed_cpu_ms": fixed_ms,
                             "cpu_ms_per_rollout_beyond_fixed": round(per_rollout, 3), **result}))
            inputs.unlink()
    return out


def resume_scan(output: Path) -> dict[str, Any]:
    """Time the key scan that `+resume_from_cache=true` does over an existing output file."""
    started = time.perf_counter()
    scan = scan_done(output, rollouts_per_task=1)
    seconds = time.perf_counter() - started
    size_mb = output.stat().st_size / 2**20
    return _row(f"resume scan, {scan.rows} lines ({size_mb:.0f} MB)", f"{seconds:.2f} s",
                {"rows": scan.rows, "size_mb": round(size_mb), "seconds": round(seconds, 2)})


def instant_agent_rss(work: Path, row_counts: list[int], concurrency: int = 256) -> list[dict[str, Any]]:
    """The collector alone (the tests' instant agent does no work), so a million rows take minutes."""
    out = []
    with instant_agent_stack(work / "instant_stack") as stack:
        for rows in row_counts:
            inputs = write_rows(work / f"instant_{rows}.jsonl", rows)
            output = work / f"instant_out_{rows}.jsonl"
            result = run_collector(stack, inputs, output, "instant_agent", concurrency)
            out.append(_row(f"collector peak RSS, instant agent, {rows} rows", f"{result['peak_rss_mb']:.0f} MB",
                            {"rows": rows, "concurrency": concurrency, **result}))
            out.append(resume_scan(output))
            inputs.unlink()
    return out


def _ratio(rows: list[dict[str, Any]], key: str) -> float:
    return round(rows[-1][key] / rows[0][key], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small row counts, no 1M run: a smoke run")
    parser.add_argument("--concurrency", default="64,256,1024")
    parser.add_argument("--throughput-rows", type=int, default=10000, help="rows of each throughput run")
    parser.add_argument("--rounds", type=int, default=1, help="throughput runs per concurrency (the best counts)")
    parser.add_argument("--rss-rows", default="10000,200000", help="row counts of the full-stack RSS runs")
    parser.add_argument("--cpu-rows", default="1000,10000,100000", help="row counts of the CPU-per-rollout runs")
    parser.add_argument("--instant-rows", default="10000,1000000",
                        help="row counts of the instant-agent RSS runs ('' for none)")
    args = parser.parse_args()
    tp_rows = 2000 if args.quick else args.throughput_rows
    rss_rows = [2000, 10000] if args.quick else [int(n) for n in args.rss_rows.split(",")]
    instant_rows = [] if args.quick else [int(n) for n in args.instant_rows.split(",") if n]
    cpu_rows = [500, 2000] if args.quick else [int(n) for n in args.cpu_rows.split(",")]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    print(f"{'benchmark':<40} {'figure':>24}", flush=True)
    with recording("collector", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ng_bench_") as tmp:
        work = Path(tmp)
        short_rows, short_concurrency = SHORT_CASE
        figures: dict[str, Any] = {"throughput": throughput(work, tp_rows, concurrencies, args.rounds),
                                   f"throughput_{short_rows}_rows": throughput(work, short_rows, [short_concurrency],
                                                                               args.rounds),
                                   "full_stack_rss": full_stack_rss(work, rss_rows),
                                   "cpu_by_rows": cpu_by_rows(work, cpu_rows)}
        figures["resume_scan"] = [resume_scan(work / f"rss_out_{rss_rows[-1]}.jsonl")]
        best = list(best_by_concurrency(figures["throughput"]).values())
        ratios = {
            f"rollouts_per_s_vs_{best[0]['concurrency']}_concurrent": {
                str(row["concurrency"]): round(row["rollouts_per_s"] / best[0]["rollouts_per_s"], 3) for row in best},
            f"cpu_ms_per_rollout_vs_{best[0]['concurrency']}_concurrent": {
                str(row["concurrency"]): round(row["cpu_ms_per_rollout"] / best[0]["cpu_ms_per_rollout"], 3)
                for row in best},
            "stack_vs_bare_client": {name: {str(row["concurrency"]): row["stack_vs_bare_client"][name] for row in best}
                                     for name in BARE_CLIENTS},
            "stack_vs_bare_same_requests": {
                name: {str(row["concurrency"]): row["stack_vs_bare_same_requests"][name] for row in best}
                for name in BARE_CLIENTS},
            f"stack_vs_bare_same_requests_{short_rows}_rows_{short_concurrency}_concurrent": max(
                (row["stack_vs_bare_same_requests"] for row in figures[f"throughput_{short_rows}_rows"]),
                key=lambda ratio: ratio["aiohttp"]),
            f"full_stack_peak_rss_{rss_rows[-1]}_vs_{rss_rows[0]}_rows": _ratio(figures["full_stack_rss"],
                                                                                "peak_rss_mb"),
            f"cpu_ms_per_rollout_{cpu_rows[-1]}_vs_{cpu_rows[0]}_rows": _ratio(figures["cpu_by_rows"],
                                                                              "cpu_ms_per_rollout_beyond_fixed"),
        }
        if instant_rows:
            instant = instant_agent_rss(work, instant_rows)
            figures["instant_agent_rss"] = [row for row in instant if "peak_rss_mb" in row]
            figures["resume_scan"] += [row for row in instant if "peak_rss_mb" not in row]
            ratios[f"instant_agent_peak_rss_{instant_rows[-1]}_vs_{instant_rows[0]}_rows"] = _ratio(
                figures["instant_agent_rss"], "peak_rss_mb")
        recorder.write(ratios, figures)


if __name__ == "__main__":
    main()
