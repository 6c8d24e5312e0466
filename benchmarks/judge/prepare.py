"""Short-answer questions whose right answer can be worded many ways (minutes in hours, a number in words, ...),
from the judge environment's seeded generator: `n` questions, judged against `expected_answer` by a judge model."""

from pathlib import Path

from nemo_gym.benchmark_layout.sources import write_rows
from nemo_gym.errors import ConfigError
from nemo_gym.resources_servers.judge.generate import generate_rows

FILE_NAME = "judge.jsonl"


def prepare(output_dir: Path, seed: int = 0, n: int = 60) -> Path:
    """Write `n` questions from `seed` to `output_dir/judge.jsonl`."""
    if n < 1:
        raise ConfigError(f"+n must be at least 1 (questions), got {n}")
    return write_rows(generate_rows(n, seed), output_dir / FILE_NAME)
