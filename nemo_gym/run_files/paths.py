"""Where a run's files are: the rollouts file `<stem>.jsonl`, its sidecars `<stem><suffix>` next to it, and the
rollout files that a glob names."""

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from nemo_gym.run_format import (
    AGGREGATE_METRICS_SUFFIX,
    COLLECT_LOG_SUFFIX,
    FAILURES_SUFFIX,
    JSONL_SIDECAR_SUFFIXES,
    MANIFEST_SUFFIX,
    MATERIALIZED_INPUTS_SUFFIX,
    PROGRESS_SUFFIX,
    REPORT_SUFFIX,
    prepared_inputs_suffix,
)


@dataclass(frozen=True)
class RunPaths:
    """The files of the run whose rollouts file is `rollouts`."""

    rollouts: Path

    def __init__(self, rollouts: str | Path) -> None:
        object.__setattr__(self, "rollouts", Path(rollouts))

    def sidecar(self, suffix: str) -> Path:
        return self.rollouts.with_name(f"{self.rollouts.stem}{suffix}")

    @property
    def failures(self) -> Path:
        return self.sidecar(FAILURES_SUFFIX)

    @property
    def materialized_inputs(self) -> Path:
        return self.sidecar(MATERIALIZED_INPUTS_SUFFIX)

    @property
    def manifest(self) -> Path:
        return self.sidecar(MANIFEST_SUFFIX)

    @property
    def aggregate_metrics(self) -> Path:
        return self.sidecar(AGGREGATE_METRICS_SUFFIX)

    @property
    def collect_log(self) -> Path:
        return self.sidecar(COLLECT_LOG_SUFFIX)

    @property
    def progress(self) -> Path:
        return self.sidecar(PROGRESS_SUFFIX)

    def prepared_inputs(self, split: str) -> Path:
        return self.sidecar(prepared_inputs_suffix(split))


def report_path(metrics_path: Path) -> Path:
    """`<stem>_report.html` next to `<stem>_aggregate_metrics.json` (a metrics file may be named freely)."""
    name = metrics_path.name.removesuffix(AGGREGATE_METRICS_SUFFIX)
    return metrics_path.with_name(name + REPORT_SUFFIX)


def is_rollout_file(path: str | Path) -> bool:
    """False for the sidecars that match a `*.jsonl` glob but never hold rollouts."""
    return not str(path).endswith(JSONL_SIDECAR_SUFFIXES)


def expand_input_glob(input_glob: str) -> list[str]:
    """Expand a glob, or comma-separated globs, into a list of existing files without repeats.

    Whitespace around a pattern is trimmed and empty patterns are dropped; each pattern's matches are sorted, and a
    file matched again by a later pattern keeps its first place. 'a/*.jsonl, b/*.jsonl' -> a's files, then b's.
    """
    paths: dict[str, None] = {}
    for pattern in (p.strip() for p in input_glob.split(",")):
        if pattern:
            for path in sorted(glob.glob(pattern, recursive=True)):
                if os.path.isfile(path):
                    paths.setdefault(path, None)
    return list(paths)


def rollout_files(input_glob: str) -> list[Path]:
    """The files `input_glob` names, in its order, without the run's sidecar files."""
    return [Path(name) for name in expand_input_glob(input_glob) if is_rollout_file(name)]
