"""aime24 and gsm8k from local files in the public formats (the folders' own sample files), and bad sources."""

import re
from pathlib import Path

import orjson
import pytest

from nemo_gym.errors import ConfigError, InputDataError
from tests.benchmarks.util import REPO_BENCHMARKS, copy_benchmark, prepare_cli
from tests.collection.util import read_rows, run_cli


def _prepared(name: str, tmp_path: Path, capsys: pytest.CaptureFixture, source: Path | None = None) -> list[dict]:
    source = source or REPO_BENCHMARKS / name / "sample_source.jsonl"
    out = prepare_cli([f"+benchmark={name}", f"+source={source}", f"+output_dir={tmp_path}"], capsys)
    rows = read_rows(tmp_path / f"{name}.jsonl")
    assert out == f"prepared {name}: {len(rows)} rows in {tmp_path / f'{name}.jsonl'}\n"
    return rows


def _records(path: Path, *records: dict | bytes) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in records))
    return path


def test_aime24_sample_rows_ask_for_a_boxed_answer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = _prepared("aime24", tmp_path, capsys)
    assert [r["expected_answer"] for r in rows] == ["12", "218", "38", "267"]  # "038" is 38
    assert [r["id"] for r in rows] == ["sample-1", "sample-2", "sample-3", "sample-4"]
    prompt = rows[3]["responses_create_params"]["input"][0]["content"]
    assert "\\boxed{}" in prompt and prompt.endswith("Find the remainder when $2^{10} + 3^{5}$ is divided by 1000.")


def test_aime24_reads_the_capitalised_spelling(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = _records(tmp_path / "aime.jsonl", {"ID": "2024-I-1", "Problem": "Find 1 + 1.", "Answer": 2})
    (row,) = _prepared("aime24", tmp_path / "out", capsys, source)
    assert (row["id"], row["expected_answer"]) == ("2024-I-1", "2")


def test_gsm8k_sample_answers_are_the_numbers_after_the_marks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = _prepared("gsm8k", tmp_path, capsys)
    assert [r["expected_answer"] for r in rows] == ["27", "1234", "150", "16"]  # "#### 1,234" is 1234
    prompt = rows[0]["responses_create_params"]["input"][0]["content"]
    assert "\\boxed{}" in prompt and prompt.endswith("How many pencils does she have left?")


@pytest.mark.parametrize("name, dataset", [("aime24", "HuggingFaceH4/aime_2024"), ("gsm8k", "openai/gsm8k")])
def test_without_a_source_the_error_says_where_to_get_one(tmp_path: Path, name: str, dataset: str) -> None:
    folder = copy_benchmark(name, tmp_path)
    result = run_cli("prepare_benchmark", [f"+benchmark={name}"], tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: benchmark '{name}' needs +source=<file>: ") and dataset in result.stderr
    assert not (folder / "data").exists()  # a failed preparation leaves nothing behind


def test_bad_sources_name_the_file_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = {"question": "q?", "answer": "x\n#### 4"}
    cases = [
        ("gsm8k", [good, b"{not json"], "gsm8k.jsonl:2: malformed JSON"),
        ("gsm8k", [good, {"answer": "#### 3"}], "gsm8k.jsonl:2: field 'question' must be non-empty text"),
        ("gsm8k", [{"question": "q?", "answer": "it is 4"}], "gsm8k.jsonl:1: field 'answer' has no final '####"),
        ("gsm8k", [{"question": "q?", "answer": "#### four"}], "gsm8k.jsonl:1: field 'answer' ends in '#### four'"),
        ("aime24", [{"problem": "p", "answer": "1000"}], "aime24.jsonl:1: field 'answer' must be an integer from 0"),
        ("aime24", [[1, 2]], "aime24.jsonl:1: a record must be a JSON object"),
    ]
    for name, records, message in cases:
        source = _records(tmp_path / f"{name}.jsonl", *records)
        with pytest.raises(InputDataError, match="^" + re.escape(str(tmp_path / message))):
            prepare_cli([f"+benchmark={name}", f"+source={source}", f"+output_dir={tmp_path / 'out'}"], capsys)
        assert not (tmp_path / "out" / f"{name}.jsonl").exists()  # nothing half-written
    with pytest.raises(ConfigError, match=r"^\+source=/no/such.jsonl: file not found$"):
        prepare_cli(["+benchmark=gsm8k", "+source=/no/such.jsonl", f"+output_dir={tmp_path}"], capsys)
