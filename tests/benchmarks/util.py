"""Helpers for the benchmark tests: benchmark folders in a scratch repository root, and the CLIs in-process."""

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from nemo_gym.cli import list_benchmarks, prepare_benchmark
from tests.helpers.stack import REPO_ROOT

REPO_BENCHMARKS = REPO_ROOT / "benchmarks"
ARITHMETIC_AGENT = "arithmetic_simple_agent"
ARITHMETIC_DATA = Path("benchmarks/arithmetic/data/arithmetic.jsonl")  # relative to the repository root


def copy_benchmark(name: str, root: Path) -> Path:
    """`root/benchmarks/<name>/` with the repository's config.yaml and prepare.py of that benchmark."""
    folder = root / "benchmarks" / name
    folder.mkdir(parents=True)
    for file in ("config.yaml", "prepare.py"):
        shutil.copy(REPO_BENCHMARKS / name / file, folder / file)
    return folder


def write_benchmark(root: Path, name: str, config: dict[str, Any], prepare_py: str) -> Path:
    folder = root / "benchmarks" / name
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "prepare.py").write_text(prepare_py)
    return folder


def math_benchmark_config(name: str, datasets: list[dict[str, Any]]) -> dict[str, Any]:
    """A benchmark config as the contract has it: a math environment, an agent and its dataset entries."""
    return {
        f"{name}_resources_server": {"resources_servers": {"math": {}}},
        f"{name}_simple_agent": {"responses_api_agents": {"simple_agent": {
            "resources_server": {"type": "resources_servers", "name": f"{name}_resources_server"},
            "model_server": {"type": "responses_api_models", "name": "policy_model"},
            "datasets": datasets}}},
    }


def prepare_cli(args: list[str], capsys: pytest.CaptureFixture) -> str:
    """ng_prepare_benchmark in this process (errors raise); its standard output."""
    assert prepare_benchmark.main_args(args) == 0
    return capsys.readouterr().out


def list_cli(capsys: pytest.CaptureFixture) -> tuple[int, dict[str, str]]:
    """ng_list_benchmarks in this process: exit status and each benchmark's output line by name."""
    code = list_benchmarks.main_args([])
    lines = capsys.readouterr().out.splitlines()[1:]  # under the header
    return code, {line.split()[0]: line for line in lines}
