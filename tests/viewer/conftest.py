"""Fixtures of the viewer tests: two real collected runs, made once per session (see `collected.py`)."""

import pytest

from tests.viewer.collected import CollectedRuns, collect_runs


@pytest.fixture(scope="session")
def collected_runs(tmp_path_factory: pytest.TempPathFactory) -> CollectedRuns:
    return collect_runs(tmp_path_factory.mktemp("viewer_runs"))
