"""The aggregate job's report: per-shard rollout counts, duplicates and outstanding failures, then the merged file.

    python -m nemo_gym.slurm.summary RUN_DIR --num-shards N [--require-complete-shards] [--write summary.json]

`--require-complete-shards` exits 1 when a shard has no completion marker (its task failed, was cancelled, or never
ran); `--write` also checks the merged output (every shard rollout exactly once, metrics file present), writes the
report as JSON, and exits 1 when the check fails.
"""

import argparse
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from nemo_gym import console
from nemo_gym.run_files.failures import latest_failures
from nemo_gym.run_files.manifest import read_manifest
from nemo_gym.run_files.rows import iter_lines, row_key
from nemo_gym.run_format import MANIFEST_SHARD_ROLLOUTS
from nemo_gym.slurm.layout import RunLayout


@dataclass
class KeyCount:
    rows: int = 0
    unique: int = 0

    @property
    def duplicates(self) -> int:
        return self.rows - self.unique


@dataclass
class ShardReport:
    shard: int
    done: bool
    rollouts: int
    duplicates: int
    expected: int | None  # from the shard's manifest; None before its first collector start
    failed: int  # failures still outstanding (their keys are not in the output)
    failures_by_class: dict[str, int] = field(default_factory=dict)


def count_keys(path: Path) -> tuple[KeyCount, set[tuple[int, int]]]:
    """Rows and distinct keys of a rollouts file (lines without a key, such as a torn tail, are not rows)."""
    count, keys = KeyCount(), set()
    for _, _, line in iter_lines(path, missing_ok=True):
        key = row_key(line)
        if key is not None:
            count.rows += 1
            keys.add(key)
    count.unique = len(keys)
    return count, keys


def _expected(manifest_path: Path) -> int | None:
    manifest = read_manifest(manifest_path)
    value = None if manifest is None else manifest.get(MANIFEST_SHARD_ROLLOUTS)
    return value if isinstance(value, int) else None


def shard_report(layout: RunLayout, shard: int) -> ShardReport:
    count, keys = count_keys(layout.shard_output(shard))
    outstanding = latest_failures([layout.shard_paths(shard).failures], keys)  # failed, and not done since
    failures = Counter(record.failure_class for record in outstanding.values())
    return ShardReport(
        shard=shard,
        done=layout.done_marker(shard).is_file(),
        rollouts=count.unique,
        duplicates=count.duplicates,
        expected=_expected(layout.shard_paths(shard).manifest),
        failed=sum(failures.values()),
        failures_by_class=dict(failures),
    )


def print_shards(reports: list[ShardReport]) -> None:
    header = f"{'SHARD':>5}  {'ROLLOUTS':>9}  {'EXPECTED':>9}  {'DUPLICATES':>10}  {'FAILED':>6}  DONE  FAILURE CLASSES"
    console.emit(header)
    for r in reports:
        expected = "?" if r.expected is None else str(r.expected)
        classes = ", ".join(f"{name}: {n}" for name, n in sorted(r.failures_by_class.items())) or "-"
        console.emit(f"{r.shard:>5}  {r.rollouts:>9}  {expected:>9}  {r.duplicates:>10}  {r.failed:>6}  "
                     f"{'yes' if r.done else 'NO':<4}  {classes}")
    console.emit(f"{'total':>5}  {sum(r.rollouts for r in reports):>9}  "
                 f"{sum(r.expected or 0 for r in reports):>9}  {sum(r.duplicates for r in reports):>10}  "
                 f"{sum(r.failed for r in reports):>6}")


def merged_report(layout: RunLayout, reports: list[ShardReport]) -> tuple[dict[str, Any], list[str]]:
    """The merged file's counts, and what is wrong with it (empty when it holds every shard rollout once)."""
    count, _ = count_keys(layout.merged_output)
    shard_total = sum(r.rollouts for r in reports)
    report = {
        "path": str(layout.merged_output),
        "rollouts": count.rows,
        "unique_keys": count.unique,
        "shard_rollouts": shard_total,
        "aggregate_metrics": str(layout.aggregate_metrics) if layout.aggregate_metrics.is_file() else None,
    }
    problems = []
    if not layout.merged_output.is_file():
        problems.append(f"no merged output at {layout.merged_output}")
    elif count.duplicates:
        problems.append(f"{count.duplicates} duplicate keys in {layout.merged_output}")
    elif count.unique != shard_total:
        problems.append(f"merged output has {count.unique} rollouts, the shards {shard_total}")
    if report["aggregate_metrics"] is None:
        problems.append(f"no metrics file at {layout.aggregate_metrics}")
    return report, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Report on the shards (and merged output) of a SLURM run.")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--num-shards", type=int, required=True)
    parser.add_argument("--require-complete-shards", action="store_true",
                        help="exit 1 unless every shard's task completed")
    parser.add_argument("--write", type=Path, help="check the merged output and write the report here as JSON")
    args = parser.parse_args(argv)

    layout = RunLayout(args.run_dir, args.num_shards)
    reports = [shard_report(layout, i) for i in range(args.num_shards)]
    print_shards(reports)
    incomplete = [r.shard for r in reports if not r.done]
    if args.require_complete_shards and incomplete:
        console.error(f"shards {incomplete} did not complete (see {layout.shard_log('<i>')}); "
                      f"continue the run with: ng_slurm_submit +run_dir={layout.run_dir} +resume=true")
        return 1
    if args.write is None:
        return 0

    merged, problems = merged_report(layout, reports)
    console.say(f"merged: {merged['unique_keys']} rollouts in {merged['path']}; metrics: {merged['aggregate_metrics']}")
    args.write.write_bytes(orjson.dumps(
        {"shards": [asdict(r) for r in reports], "merged": merged, "problems": problems}, option=orjson.OPT_INDENT_2
    ))
    for problem in problems:
        console.error(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
