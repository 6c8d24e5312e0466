"""Four-option questions, right by construction, from the multiple_choice environment's seeded generator: `n`
questions, the right option at A, B, C and D equally often (what the per-position metrics compare against)."""

from pathlib import Path

from nemo_gym.benchmark_layout.sources import write_rows
from nemo_gym.errors import ConfigError
from nemo_gym.resources_servers.multiple_choice.generate import generate_rows

FILE_NAME = "multiple_choice.jsonl"


def prepare(output_dir: Path, seed: int = 0, n: int = 100) -> Path:
    """Write `n` questions from `seed` to `output_dir/multiple_choice.jsonl`."""
    if n < 1:
        raise ConfigError(f"+n must be at least 1 (questions), got {n}")
    return write_rows(generate_rows(n, seed), output_dir / FILE_NAME)
