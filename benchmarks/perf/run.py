"""The performance suite in one command: starts what it needs, prints a table, writes benchmarks/results/latest.json.

    .venv/bin/python -m benchmarks.perf.run                 # throughput + RSS 10k/200k + resume scan (~10 min)
    .venv/bin/python -m benchmarks.perf.run --quick         # smaller row counts (~2 min)
    .venv/bin/python -m benchmarks.perf.run --million       # adds collector RSS and resume scan at 1M rows

Measured: (1) orchestration throughput of the full stack (collector -> simple_agent -> vllm_model -> instant stub
chat model, weather environment) at 64/256/1024 concurrent; (3) collector peak RSS at 10k/200k rows on the full
stack and, with --million, at 10k/1M rows on the tests' instant agent; (4) resume scan time of the output file.
The saturation run against real vLLM is `benchmarks.perf.saturation`; the HTTP client comparison is
`benchmarks.perf.http_clients`. Never run by the test suite.
"""

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.perf.harness import (
    REPO_ROOT, WEATHER_AGENT, instant_agent_stack, load_average, run_collector, weather_stack, write_rows,
)
from nemo_gym.rollout_collection.store import scan_done

RESULTS = REPO_ROOT / "benchmarks" / "results" / "latest.json"


def _row(name: str, figure: str, detail: dict[str, Any]) -> dict[str, Any]:
    entry = {"benchmark": name, "figure": figure, "load_average": load_average(), **detail}
    print(f"{name:<40} {figure:>24}   load {entry['load_average']}", flush=True)
    return entry


def throughput(work: Path, rows: int, concurrencies: list[int]) -> list[dict[str, Any]]:
    inputs = write_rows(work / "weather.jsonl", rows)
    out = []
    with weather_stack(work / "weather_stack") as stack:
        run_collector(stack, write_rows(work / "warmup.jsonl", 500), work / "warmup_out.jsonl", WEATHER_AGENT, 64)
        for concurrency in concurrencies:
            result = run_collector(stack, inputs, work / f"tp_{concurrency}.jsonl", WEATHER_AGENT, concurrency)
            out.append(_row(f"full stack, {concurrency} concurrent, {rows} rows",
                            f"{result['rollouts_per_s']:.0f}/s {result['cpu_ms_per_rollout']:.2f} cpu-ms", {"concurrency": concurrency, **result}))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small row counts: a smoke run of the suite")
    parser.add_argument("--million", action="store_true", help="also 1M rows on the instant agent (~10 min more)")
    parser.add_argument("--concurrency", default="64,256,1024")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    tp_rows, rss_rows = (2000, [2000, 10000]) if args.quick else (10000, [10000, 200000])
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    print(f"{'benchmark':<40} {'figure':>24}", flush=True)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ng_bench_") as tmp:
        work = Path(tmp)
        results += throughput(work, tp_rows, concurrencies)
        results += full_stack_rss(work, rss_rows)
        results.append(resume_scan(work / f"rss_out_{rss_rows[-1]}.jsonl"))
        if args.million:
            results += instant_agent_rss(work, [10000, 1000000])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}", "results": results}
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
