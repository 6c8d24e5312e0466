"""Where a SLURM run keeps its files (file names from nemo_gym.run_format). The job scripts get these paths as
rendered values, so they cannot drift from the Python side."""

from dataclasses import dataclass
from pathlib import Path

from nemo_gym.run_files.paths import RunPaths
from nemo_gym.run_format import MERGED_ROLLOUTS, SUBMISSION, SUMMARY, done_marker_name, shard_file_name


def submission_path(run_dir: Path) -> Path:
    """The run's submission record; it also holds the shard count the rest of the layout needs."""
    return run_dir / "slurm" / SUBMISSION


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

    def shard_log(self, shard: int | str) -> Path:
        """The log of one array task (appended across requeues); `%a` gives the #SBATCH --output pattern."""
        return self.logs_dir / f"shard{shard}.log"

    @property
    def aggregate_log(self) -> Path:
        return self.logs_dir / "aggregate.log"

    @property
    def collect_script(self) -> Path:
        return self.slurm_dir / "collect.sbatch"

    @property
    def aggregate_script(self) -> Path:
        return self.slurm_dir / "aggregate.sbatch"

    @property
    def merged_output(self) -> Path:
        return self.run_dir / MERGED_ROLLOUTS

    @property
    def aggregate_metrics(self) -> Path:
        return RunPaths(self.merged_output).aggregate_metrics

    @property
    def summary(self) -> Path:
        return self.run_dir / SUMMARY

    def shard_output(self, shard: int | str) -> Path:
        """The rollouts file of `shard`; a shell expression such as `${SHARD}` gives the job script's path."""
        return self.rollouts_dir / shard_file_name(shard, self.num_shards)

    def shard_outputs_glob(self) -> Path:
        return self.rollouts_dir / shard_file_name("*", self.num_shards)

    def shard_paths(self, shard: int) -> RunPaths:
        """The sidecars of `shard`'s rollouts file."""
        return RunPaths(self.shard_output(shard))

    def done_marker(self, shard: int | str) -> Path:
        return self.slurm_dir / done_marker_name(shard)

    def incomplete_shards(self) -> list[int]:
        return [i for i in range(self.num_shards) if not self.done_marker(i).is_file()]
