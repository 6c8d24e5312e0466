"""The side-by-side tests need the real NeMo Gym 0.4.0: without it they fail, never skip. One helper runs it."""

from pathlib import Path

import pytest

from tests.helpers import nemo_gym_reference as reference
from tests.helpers.stack import REPO_ROOT


def test_missing_nemo_gym_fails_the_test(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(reference, "NEMO_GYM_VENV", tmp_path / "no-venv")
    with pytest.raises(pytest.fail.Exception, match=r"NeMo Gym 0.4.0 is not installed in .*scripts/setup_tests.sh"):
        reference.example_rows()
    with pytest.raises(pytest.fail.Exception, match="is not installed"):
        reference.reference_collect(tmp_path, 1, tmp_path / "in.jsonl", tmp_path / "out.jsonl")


def test_installed_nemo_gym_has_the_example_environment() -> None:
    rows = reference.example_rows()
    assert rows.is_file() and len(rows.read_bytes().splitlines()) == 5
    assert (reference.NEMO_GYM_VENV / "bin" / "ng_collect_rollouts").exists()


def test_one_helper_runs_nemo_gym_and_its_ray_reports_no_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    env = reference.reference_env("tag")
    assert env["RAY_USAGE_STATS_ENABLED"] == "0" and env[reference.TAG_ENV] == "tag"
    assert "RAY_ADDRESS" not in env and "PYTHONPATH" not in env
    # Where NeMo Gym is installed is written in one place: every test finds it through that helper.
    venv = reference.NEMO_GYM_VENV.name
    holders = [path.relative_to(REPO_ROOT) for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
               if f'/ "{venv}"' in path.read_text()]
    assert holders == [Path("tests/helpers/nemo_gym_reference.py")]
