"""ng_prepare_benchmark's errors: one line naming the file and line or the option, exit status 2, nothing written."""

from pathlib import Path

import pytest

from nemo_gym.errors import ConfigError, InputDataError
from tests.benchmarks.util import math_benchmark_config, prepare_cli, write_benchmark
from tests.collection.util import run_cli
from tests.helpers.stack import REPO_ROOT

CONFIG = math_benchmark_config("x", [{"name": "x", "type": "benchmark", "jsonl_fpath": "benchmarks/x/data/x.jsonl"}])
WRITES_A_ROW_WITHOUT_INPUT = '''import json
from pathlib import Path


def prepare(output_dir: Path, rows: int = 2) -> Path:
    path = output_dir / "x.jsonl"
    good = {"responses_create_params": {"input": "q"}}
    path.write_text(json.dumps(good) + "\\n" + json.dumps({"responses_create_params": {}}) + "\\n")
    return path
'''


def test_unknown_benchmark_lists_the_known_ones() -> None:
    result = run_cli("prepare_benchmark", ["+benchmark=nope"], REPO_ROOT)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: unknown benchmark 'nope' (known: ") and "arithmetic" in result.stderr
    missing = run_cli("prepare_benchmark", [], REPO_ROOT)
    assert missing.returncode == 2 and missing.stderr.startswith("error: missing +benchmark=<name> (known: ")


@pytest.mark.parametrize("args, message", [
    (["+benchmark=[arithmetic,gsm8k]"], r"^\+benchmark must be a string, got \['arithmetic', 'gsm8k'\]$"),
    (["+benchmark=arithmetic", "+output_dir=[a,b]"], r"^\+output_dir must be a string or null, got \['a', 'b'\]$"),
])
def test_the_commands_own_options_are_typed(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ConfigError, match=message):
        prepare_cli(args, capsys)


def test_unknown_options_and_wrong_types_are_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = [f"+output_dir={tmp_path / 'out'}"]
    with pytest.raises(ConfigError, match=r"^unknown option \+sed for benchmark 'arithmetic' \(benchmarks/arithmetic/"
                                          r"prepare.py takes \+seed, \+n\)$"):
        prepare_cli(["+benchmark=arithmetic", "+sed=3", *out], capsys)
    with pytest.raises(ConfigError, match=r"^\+seed must be an integer, got 'abc'$"):
        prepare_cli(["+benchmark=arithmetic", "+seed=abc", *out], capsys)
    with pytest.raises(ConfigError, match=r"^\+n must be at least 1"):
        prepare_cli(["+benchmark=arithmetic", "+n=0", *out], capsys)
    assert not (tmp_path / "out" / "arithmetic.jsonl").exists()
    result = run_cli("prepare_benchmark", ["+benchmark=aime24", "+seed=1", *out], REPO_ROOT)
    assert result.returncode == 2 and "unknown option +seed for benchmark 'aime24'" in result.stderr


def test_a_bad_prepare_py_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture) -> None:
    folder = write_benchmark(tmp_path, "x", CONFIG, "def prepare_data(output_dir):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^benchmarks/x/prepare.py defines no function prepare\(output_dir, "):
        prepare_cli(["+benchmark=x"], capsys)
    (folder / "prepare.py").write_text("def prepare(output_dir):\n    return (\n")
    with pytest.raises(ConfigError, match=r"^benchmarks/x/prepare.py:2: invalid Python"):
        prepare_cli(["+benchmark=x"], capsys)
    (folder / "prepare.py").write_text("def prepare(output_dir, *, source):\n    return 3\n")
    with pytest.raises(ConfigError, match=r"^benchmark 'x' needs \+source=\.\.\. \(benchmarks/x/prepare.py\)$"):
        prepare_cli(["+benchmark=x"], capsys)
    (folder / "prepare.py").write_text("def prepare(output_dir):\n    return 3\n")
    with pytest.raises(ConfigError, match=r"prepare\(\) must return the path of the file it wrote, got 3$"):
        prepare_cli(["+benchmark=x"], capsys)


def test_every_written_row_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture) -> None:
    write_benchmark(tmp_path, "x", CONFIG, WRITES_A_ROW_WITHOUT_INPUT)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputDataError, match=r"^benchmarks/x/data/x.jsonl:2: responses_create_params.input must be "):
        prepare_cli(["+benchmark=x", "+rows=2"], capsys)
