"""The install scripts' split: scripts/main.sh installs only what the main job uses (scripts/setup.sh), everything
only the tests need comes from scripts/setup_tests.sh, which scripts/test.sh (and so CI) runs; and
scripts/gpu_check.sh says so, and checks nothing, on a machine without a GPU."""

import os
import subprocess
from pathlib import Path

from tests.helpers.stack import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"
TEST_ONLY = ("nemo-gym==0.4.0", ".venv-nemo-gym", "apt-get", "slurm-wlm", "chromium", "[dev]", "playwright")


def _code_lines(path: Path) -> str:
    """The script without its comments (whole-line ones, and trailing ones after two spaces)."""
    return "\n".join(line.split("  # ")[0].strip() for line in path.read_text().splitlines()
                     if not line.lstrip().startswith("#"))


def test_main_job_setup_installs_nothing_only_the_tests_use() -> None:
    setup = _code_lines(SCRIPTS / "setup.sh")
    assert not [word for word in TEST_ONLY if word in setup]
    assert "bash scripts/setup.sh" in _code_lines(SCRIPTS / "main.sh")
    assert "setup_tests" not in _code_lines(SCRIPTS / "main.sh")
    tests_setup = _code_lines(SCRIPTS / "setup_tests.sh")
    assert all(word in tests_setup for word in ("nemo-gym==0.4.0", "slurm-wlm", "chromium", "[dev]"))


def test_ci_runs_the_test_script_which_installs_both() -> None:
    assert "bash scripts/test.sh" in _code_lines(REPO_ROOT / ".ci" / "run")
    test_sh = _code_lines(SCRIPTS / "test.sh").splitlines()
    setup, tests_setup = test_sh.index("bash scripts/setup.sh"), test_sh.index("bash scripts/setup_tests.sh")
    pytest_line = next(i for i, line in enumerate(test_sh) if "-m pytest" in line)
    assert setup < tests_setup < pytest_line


def test_gpu_check_says_there_is_no_gpu_and_checks_nothing(tmp_path: Path) -> None:
    results = REPO_ROOT / "benchmarks" / "results" / "gpu_check.json"
    before = results.read_bytes() if results.exists() else None
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no driver'; exit 9\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    result = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh")], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 1
    assert "no NVIDIA GPU on this machine (nvidia-smi -L lists none): nothing was checked" in result.stdout
    assert (results.read_bytes() if results.exists() else None) == before


def test_setup_installs_the_vllm_the_extras_name() -> None:
    import re
    import tomllib

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    setup = (SCRIPTS / "setup.sh").read_text()
    assert f'CPU_VLLM_PACKAGE="{extras["vllm"][0]}"' in setup
    assert re.match(r"vllm\b", extras["vllm-gpu"][0]) and 'GPU_VLLM_PACKAGE="vllm"' in setup
