"""Opening a run in two phases: the rollout table answers once the index is built, while the overview's metrics are
computed in the background; they are the same metrics, kept for the next open, and recomputed when missing."""

import threading
from pathlib import Path

import pytest

from nemo_gym.viewer import overview_build
from nemo_gym.viewer.errors import ViewerError
from nemo_gym.viewer.index import open_run
from nemo_gym.viewer.query import RowFilter, select
from nemo_gym.viewer.render_overview import run_overview
from tests.viewer.synthetic import write_run


def _held_build(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make the background phase wait for `release`; `started` is set when it begins."""
    started, release = threading.Event(), threading.Event()
    real = overview_build.build_overview

    def held(*args, **kwargs):
        started.set()
        assert release.wait(timeout=60), "the test never released the overview phase"
        return real(*args, **kwargs)

    monkeypatch.setattr(overview_build, "build_overview", held)
    return started, release


def test_the_table_answers_while_the_overview_is_computed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (path,) = write_run(tmp_path / "run.jsonl", tasks=10, repeats=4, failed={(3, 3): "timeout"})
    expected = open_run(str(path), "a", tmp_path / "one_pass").overview()  # computed with nothing held
    started, release = _held_build(monkeypatch)
    index = open_run(str(path), "a", tmp_path / "cache")
    assert started.wait(timeout=60)
    assert not index.overview_job.ready
    page = select(index, RowFilter(), "key", False, 0, 10)  # the rollout table does not wait
    assert len(page.positions) == 10 and page.total == 40  # 39 rollouts and the failure
    html = run_overview(index, lambda run, cls: None)
    assert "computing the metrics of this run" in html and "http-equiv=\"refresh\"" in html
    release.set()
    assert index.overview() == expected
    assert index.overview_job.ready and "computing the metrics" not in run_overview(index, lambda run, cls: None)


def test_an_overview_never_finished_is_computed_on_the_next_open(tmp_path: Path) -> None:
    (path,) = write_run(tmp_path / "run.jsonl", tasks=6, repeats=2)
    first = open_run(str(path), "a", tmp_path / "cache")
    expected = first.overview()
    (first.directory / overview_build.OVERVIEW).unlink()  # as when the viewer stopped before the phase ended
    again = open_run(str(path), "a", tmp_path / "cache")
    assert not again.built and again.overview() == expected
    assert (again.directory / overview_build.OVERVIEW).is_file()
    reused = open_run(str(path), "a", tmp_path / "cache")
    assert reused.overview_job.ready and reused.overview() == expected  # read from the file, no thread


def test_a_failed_overview_phase_is_an_error_of_the_overview_only(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (path,) = write_run(tmp_path / "run.jsonl", tasks=4, repeats=2)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(overview_build, "build_overview", broken)
    index = open_run(str(path), "a", tmp_path / "cache")
    with pytest.raises(ViewerError, match="computing the overview failed: OSError: disk full"):
        index.overview()
    assert select(index, RowFilter(), "key", False, 0, 5).total == 8
