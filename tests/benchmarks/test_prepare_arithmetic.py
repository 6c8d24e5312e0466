"""ng_prepare_benchmark +benchmark=arithmetic: four graded levels from a seed, valid rows, the config's file."""

import re
from pathlib import Path

import pytest

from tests.benchmarks.util import copy_benchmark, list_cli, prepare_cli
from tests.collection.util import read_rows, run_cli
from tests.helpers.stack import REPO_ROOT

SHAPES = {  # level -> the question's expression
    1: re.compile(r"\d \+ \d"),
    2: re.compile(r"[1-9]\d \+ [1-9]\d"),
    3: re.compile(r"[1-9]\d \* [1-9]\d"),
    4: re.compile(r"[2-9] \+ [2-9] \* [2-9]|\([2-9] \+ [2-9]\) - [2-9]"),
}


def _prepare(out: Path, *options: str) -> bytes:
    result = run_cli("prepare_benchmark", ["+benchmark=arithmetic", f"+output_dir={out}", *options], REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"prepared arithmetic: 20 rows in {out / 'arithmetic.jsonl'}"
    return (out / "arithmetic.jsonl").read_bytes()


def test_same_seed_same_rows_and_every_level_is_what_it_says(tmp_path: Path) -> None:
    first = _prepare(tmp_path / "a", "+seed=7", "+n=5")
    assert _prepare(tmp_path / "b", "+seed=7", "+n=5") == first
    assert _prepare(tmp_path / "c", "+seed=8", "+n=5") != first
    rows = read_rows(tmp_path / "a" / "arithmetic.jsonl")
    assert [row["level"] for row in rows] == [1] * 5 + [2] * 5 + [3] * 5 + [4] * 5
    for row in rows:
        expression = row["question"].removeprefix("What is ").removesuffix("?")
        assert SHAPES[row["level"]].fullmatch(expression), row["question"]
        assert row["expected_answer"] == str(eval(expression.replace(" ", "")))  # digits and + - * ( ) only
        (message,) = row["responses_create_params"]["input"]
        assert message == {"role": "user", "content": f"{row['question']} Answer with just the number."}
    fourth = {r["question"].count("(") for r in rows if r["level"] == 4}
    assert fourth == {0, 1}  # both two-step forms occur (seed 7)


def test_default_output_is_the_file_the_config_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    copy_benchmark("arithmetic", tmp_path)
    monkeypatch.chdir(tmp_path)
    out = prepare_cli(["+benchmark=arithmetic"], capsys)
    assert out == "prepared arithmetic: 200 rows in benchmarks/arithmetic/data/arithmetic.jsonl\n"
    code, lines = list_cli(capsys)
    assert code == 0 and "benchmark: 200 rows" in lines["arithmetic"]
