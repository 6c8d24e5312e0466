"""GSM8K from a local copy of the public test set: JSONL records with `question` and `answer`, the answer being
the worked solution ending in `#### N` (N may have thousands commas: `#### 1,234` is 1234). Nothing is downloaded.

    ng_prepare_benchmark +benchmark=gsm8k +source=path/to/gsm8k_test.jsonl
"""

import re
from pathlib import Path
from typing import Any, Iterator

from nemo_gym.benchmark_layout.sources import read_records, require_source, text_field, write_rows
from nemo_gym.errors import InputDataError

FILE_NAME = "gsm8k.jsonl"
FINAL_MARK = "####"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
WHERE_TO_GET = ("the GSM8K test file (test.jsonl of github.com/openai/grade-school-math, or the Hugging Face dataset "
                "openai/gsm8k, config 'main', split 'test', saved with datasets' .to_json()); see "
                "benchmarks/gsm8k/README.md")
PROMPT = "Solve the following problem step by step. Put the final answer in \\boxed{{}}.\n\n{question}"
MAX_OUTPUT_TOKENS = 1024


def final_answer(where: str, solution: str) -> str:
    """The number after the last `####` of a GSM8K solution, without thousands commas."""
    if FINAL_MARK not in solution:
        raise InputDataError(f"{where}: field 'answer' has no final '{FINAL_MARK} <number>' line")
    value = solution.rsplit(FINAL_MARK, 1)[1].strip().replace(",", "")
    if not NUMBER.fullmatch(value):
        raise InputDataError(f"{where}: field 'answer' ends in '{FINAL_MARK} {value}', which is not a number")
    return value


def _rows(source: Path) -> Iterator[dict[str, Any]]:
    for where, record in read_records(source):
        question = text_field(where, record, "question")
        yield {
            "responses_create_params": {
                "input": [{"role": "user", "content": PROMPT.format(question=question)}],
                "max_output_tokens": MAX_OUTPUT_TOKENS,
            },
            "expected_answer": final_answer(where, text_field(where, record, "answer")),
        }


def prepare(output_dir: Path, source: Path | None = None) -> Path:
    """Convert the GSM8K file `source` into benchmark rows at `output_dir/gsm8k.jsonl`."""
    return write_rows(_rows(require_source(source, "gsm8k", WHERE_TO_GET)), output_dir / FILE_NAME)
