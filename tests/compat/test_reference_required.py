"""The side-by-side tests need the real NeMo Gym 0.4.0: without it they fail, never skip."""

from pathlib import Path

import pytest

from tests.compat import reference


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
