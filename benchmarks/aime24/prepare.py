"""AIME 2024 from a local copy of the public problems: JSONL records with `problem` and `answer` (an integer from
0 to 999; `Problem`/`Answer` spellings are read too), `id` or `ID` kept when present. Nothing is downloaded.

    ng_prepare_benchmark +benchmark=aime24 +source=path/to/aime_2024.jsonl
"""

from pathlib import Path
from typing import Any, Iterator

from nemo_gym.benchmark_layout.sources import read_records, require_source, text_field, write_rows
from nemo_gym.errors import InputDataError

FILE_NAME = "aime24.jsonl"
WHERE_TO_GET = ("a JSONL file of the 30 AIME 2024 problems with 'problem' and 'answer' fields, e.g. the Hugging Face "
                "dataset HuggingFaceH4/aime_2024 saved with datasets' .to_json(); see benchmarks/aime24/README.md")
PROMPT = ("Solve the following problem. The answer is an integer from 0 to 999. "
          "Put the final answer in \\boxed{{}}.\n\n{problem}")
MAX_OUTPUT_TOKENS = 1024


def _answer(where: str, record: dict[str, Any]) -> str:
    text = text_field(where, record, "answer")
    if not text.isdigit() or int(text) > 999:
        raise InputDataError(f"{where}: field 'answer' must be an integer from 0 to 999, got {text!r}")
    return str(int(text))  # "033" and 33 are the same answer


def _rows(source: Path) -> Iterator[dict[str, Any]]:
    for where, record in read_records(source):
        problem = text_field(where, record, "problem")
        row: dict[str, Any] = {
            "responses_create_params": {
                "input": [{"role": "user", "content": PROMPT.format(problem=problem)}],
                "max_output_tokens": MAX_OUTPUT_TOKENS,
            },
            "expected_answer": _answer(where, record),
        }
        problem_id = record.get("id", record.get("ID"))
        if problem_id is not None:
            row["id"] = str(problem_id)
        yield row


def prepare(output_dir: Path, source: Path | None = None) -> Path:
    """Convert the AIME 2024 file `source` into benchmark rows at `output_dir/aime24.jsonl`."""
    return write_rows(_rows(require_source(source, "aime24", WHERE_TO_GET)), output_dir / FILE_NAME)
