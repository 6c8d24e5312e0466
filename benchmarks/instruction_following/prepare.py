"""Writing tasks with one to three verifiable instructions (IFEval's kinds and format), from the
instruction_following environment's seeded generator: `n` tasks, every kind of instruction asked."""

from pathlib import Path

from nemo_gym.benchmark_layout.sources import write_rows
from nemo_gym.errors import ConfigError
from nemo_gym.resources_servers.instruction_following.generate import generate_rows

FILE_NAME = "instruction_following.jsonl"


def prepare(output_dir: Path, seed: int = 0, n: int = 60) -> Path:
    """Write `n` tasks from `seed` to `output_dir/instruction_following.jsonl`."""
    if n < 1:
        raise ConfigError(f"+n must be at least 1 (tasks), got {n}")
    return write_rows(generate_rows(n, seed), output_dir / FILE_NAME)
