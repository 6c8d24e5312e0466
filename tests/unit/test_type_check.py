"""The type check that scripts/test.sh runs beside the tests (mypy, [tool.mypy] in pyproject.toml) catches a planted
type error, holds the public API to its strict settings, and runs where a failure stops the test command."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PLANTED = '''\
def length(text: str) -> int:
    return len(text)


def untyped(value):
    return value


count: int = length(3)
'''


def _mypy_on_planted(tmp_path: Path, package: str) -> subprocess.CompletedProcess[str]:
    """mypy with the project's configuration on a module planted at `package`.planted (a copy of nemo_gym's layout
    in `tmp_path`, so the per-module overrides apply to it as they do to the package)."""
    parts = package.split(".")
    folder = tmp_path.joinpath(*parts)
    folder.mkdir(parents=True)
    for depth in range(1, len(parts) + 1):
        tmp_path.joinpath(*parts[:depth], "__init__.py").touch()
    (folder / "planted.py").write_text(PLANTED)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), str(folder / "planted.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_planted_type_error_fails_the_check(tmp_path: Path) -> None:
    result = _mypy_on_planted(tmp_path, "nemo_gym.metrics")
    assert result.returncode == 1, result.stdout + result.stderr
    assert ('planted.py:9: error: Argument 1 to "length" has incompatible type "int"; expected "str"  [arg-type]'
            in result.stdout), result.stdout
    # Outside the strict packages an unannotated function is allowed (and its body still checked).
    assert "no-untyped-def" not in result.stdout, result.stdout


def test_the_public_api_is_checked_strictly(tmp_path: Path) -> None:
    result = _mypy_on_planted(tmp_path, "nemo_gym.experience")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "planted.py:5: error: Function is missing a type annotation  [no-untyped-def]" in result.stdout, result.stdout
    assert "planted.py:9: error: Argument 1 to \"length\"" in result.stdout, result.stdout


def test_the_test_command_type_checks_beside_the_tests_and_fails_on_an_error() -> None:
    text = (REPO / "scripts" / "test.sh").read_text()
    lines = [line.strip() for line in text.splitlines() if not line.lstrip().startswith("#")]
    mypy = [line for line in lines if ".venv/bin/python -m mypy" in line]
    assert len(mypy) == 1, "scripts/test.sh must run `.venv/bin/python -m mypy` (the whole package, as configured)"
    assert mypy[0].startswith("setsid .venv/bin/python -m mypy ") and mypy[0].endswith("&"), mypy[0]
    # Its status is waited for and ends the run like a failing test's.
    assert 'wait "$mypy_job"' in lines and lines[lines.index('wait "$mypy_job"') + 1] == "mypy_code=$?"
    assert any(line.startswith("for status in") and '"$mypy_code"' in line for line in lines)
