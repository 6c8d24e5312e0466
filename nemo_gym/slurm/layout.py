"""Where a SLURM run keeps its files. The job script templates in job_scripts/ use the same names."""

from dataclasses import dataclass
from pathlib import Path


def submission_path(run_dir: Path) -> Path:
    """The run's submission record; it also holds the shard count the rest of the layout needs."""
    return run_dir / "slurm" / "submission.json"


@dataclass(frozen=True)
class RunLayout:
    """The files under one run directory.

    run_dir/
      slurm/       rendered job scripts, submission.json, shard{i}.done markers
      logs/        shard{i}.log per array task (appended across requeues), shard{i}/<attempt>/ server logs,
                   aggregate.log
      rollouts/    rollouts-shard{i}-of{N}.jsonl and their sidecars
      rollouts.jsonl, rollouts_aggregate_metrics.json, summary.json   written by the aggregate job
    """

    run_dir: Path
    num_shards: int

    @property
    def slurm_dir(self) -> Path:
        return self.run_dir / "slurm"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def rollouts_dir(self) -> Path:
        return self.run_dir / "rollouts"

    @property
    def submission(self) -> Path:
        return submission_path(self.run_dir)

    @property
    def collect_script(self) -> Path:
        return self.slurm_dir / "collect.sbatch"

    @property
    def aggregate_script(self) -> Path:
        return self.slurm_dir / "aggregate.sbatch"

    @property
    def merged_output(self) -> Path:
        return self.run_dir / "rollouts.jsonl"

    @property
    def aggregate_metrics(self) -> Path:
        return self.run_dir / "rollouts_aggregate_metrics.json"

    @property
    def summary(self) -> Path:
        return self.run_dir / "summary.json"

    def shard_output(self, shard: int) -> Path:
        return self.rollouts_dir / f"rollouts-shard{shard}-of{self.num_shards}.jsonl"

    def shard_sidecar(self, shard: int, suffix: str) -> Path:
        output = self.shard_output(shard)
        return output.with_name(f"{output.stem}{suffix}")

    def done_marker(self, shard: int) -> Path:
        return self.slurm_dir / f"shard{shard}.done"

    def incomplete_shards(self) -> list[int]:
        return [i for i in range(self.num_shards) if not self.done_marker(i).is_file()]
