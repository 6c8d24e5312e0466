"""Benchmark discovery and ng_list_benchmarks: which folders are benchmarks, their environment and split sizes."""

from pathlib import Path

import pytest

from nemo_gym.benchmark_layout import benchmark_holding, find_benchmarks
from tests.benchmarks.util import REPO_BENCHMARKS, list_cli, math_benchmark_config, write_benchmark
from tests.collection.util import run_cli

PREPARE_PY = "def prepare(output_dir, **options):\n    raise AssertionError('not called by listing')\n"


def _layout(root: Path) -> None:
    datasets = [{"name": "alpha", "type": "benchmark", "jsonl_fpath": "benchmarks/alpha/data/alpha.jsonl"},
                {"name": "alpha_val", "type": "validation", "jsonl_fpath": "benchmarks/alpha/data/val.jsonl"}]
    alpha = write_benchmark(root, "alpha", math_benchmark_config("alpha", datasets), PREPARE_PY)
    (alpha / "data").mkdir()
    (alpha / "data" / "alpha.jsonl").write_text('{"a": 1}\n{"a": 2}\n\n{"a": 3}\n')
    write_benchmark(root, "beta", math_benchmark_config("beta", [
        {"name": "beta", "type": "benchmark", "jsonl_fpath": "benchmarks/beta/data/beta.jsonl"}]), PREPARE_PY)
    for other in ("perf", "results", "notes"):  # performance scripts, their results, a folder without prepare.py
        (root / "benchmarks" / other).mkdir()
    (root / "benchmarks" / "perf" / "run.py").write_text("")
    (root / "benchmarks" / "notes" / "config.yaml").write_text("{}\n")


def test_list_shows_each_benchmark_with_environment_split_sizes_and_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    _layout(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, lines = list_cli(capsys)
    assert code == 0 and sorted(lines) == ["alpha", "beta"]  # the current directory wins over the repository
    assert lines["alpha"].split()[1] == "math"
    assert "benchmark: 3 rows, validation: not prepared" in lines["alpha"]
    assert "benchmark: not prepared" in lines["beta"] and lines["beta"].rstrip().endswith("benchmarks/beta")


def test_a_broken_config_is_listed_with_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    _layout(tmp_path)
    (tmp_path / "benchmarks" / "beta" / "config.yaml").write_text("beta: [unclosed\n")
    monkeypatch.chdir(tmp_path)
    code, lines = list_cli(capsys)
    assert code == 2 and "benchmark: 3 rows" in lines["alpha"]
    assert "error: benchmarks/beta/config.yaml: invalid YAML" in lines["beta"]


def test_outside_a_repository_the_installed_repository_is_listed(tmp_path: Path) -> None:
    result = run_cli("list_benchmarks", [], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    on_disk = sorted(p.name for p in REPO_BENCHMARKS.iterdir() if (p / "config.yaml").is_file()
                     and (p / "prepare.py").is_file())
    assert sorted(lines) == on_disk and {"arithmetic", "aime24", "gsm8k"} <= set(lines)
    for name in ("arithmetic", "aime24", "gsm8k"):
        assert lines[name].split()[1] == "math" and lines[name].rstrip().endswith(str(REPO_BENCHMARKS / name))
    assert sorted(find_benchmarks(tmp_path)) == on_disk


def test_the_benchmark_holding_a_dataset_path_is_found(tmp_path: Path) -> None:
    _layout(tmp_path)
    assert benchmark_holding(tmp_path / "benchmarks" / "alpha" / "data" / "missing.jsonl") == "alpha"
    assert benchmark_holding(tmp_path / "benchmarks" / "notes" / "x.jsonl") is None
    assert benchmark_holding(tmp_path / "elsewhere.jsonl") is None
