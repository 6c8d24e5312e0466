"""Fixtures of the viewer tests: two real collected runs (once per session), and `ng_view` as a real subprocess."""

from pathlib import Path
from typing import Iterator

import pytest

from tests.viewer.collected import CollectedRuns, collect_runs


@pytest.fixture(scope="session")
def collected_runs(tmp_path_factory: pytest.TempPathFactory) -> CollectedRuns:
    return collect_runs(tmp_path_factory.mktemp("viewer_runs"))


@pytest.fixture
def index_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "index"
