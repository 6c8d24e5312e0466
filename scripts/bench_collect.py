"""Collector benchmark (issue 3): the full stack against an instant stub model, at 10k and 200k rows.

    .venv/bin/python scripts/bench_collect.py [--rows 10000,200000] [--concurrency 256]

Starts ng_run (simple_agent + weather environment + vllm_model in front of an instant stub chat model) and runs the
real collector once per row count in its own process; prints rollouts/s and the collector's peak RSS, and whether
the largest run stays within 1.2x of the smallest. About 8 minutes on a 2-core machine at the default sizes.
The full suite, with more figures, is `python -m benchmarks.perf.run`.
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.perf.harness import WEATHER_AGENT, load_average, run_collector, weather_stack, write_rows  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="10000,200000", help="comma-separated row counts")
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    counts = [int(n) for n in args.rows.split(",")]
    print(f"{'rows':>8} {'rollouts/s':>11} {'peak RSS':>9} {'cpu-ms/rollout':>15}  load average", flush=True)
    peaks = []
    with tempfile.TemporaryDirectory(prefix="ng_bench_collect_") as tmp:
        work = Path(tmp)
        with weather_stack(work / "stack") as stack:
            for rows in counts:
                inputs = write_rows(work / f"in_{rows}.jsonl", rows)
                result = run_collector(stack, inputs, work / f"out_{rows}.jsonl", WEATHER_AGENT, args.concurrency)
                peaks.append(result["peak_rss_mb"])
                print(f"{rows:>8} {result['rollouts_per_s']:>11.0f} {result['peak_rss_mb']:>6.0f} MB "
                      f"{result['cpu_ms_per_rollout']:>15.2f}  {load_average()}", flush=True)
    ratio = peaks[-1] / peaks[0]
    print(f"peak RSS at {counts[-1]} rows = {ratio:.2f}x of {counts[0]} rows (goal <= 1.2x)")
    return 0 if ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
