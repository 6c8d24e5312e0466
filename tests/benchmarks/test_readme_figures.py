"""Every performance figure in README.md and docs/ is the one its results file in benchmarks/results/ holds."""

import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.perf.__main__ import BENCHMARKS
from benchmarks.perf.figure_tables import load
from benchmarks.perf.readme_figures import BLOCK, problems, write
from tests.helpers.stack import REPO_ROOT


def _copy_pages(root: Path) -> Path:
    shutil.copy(REPO_ROOT / "README.md", root / "README.md")
    shutil.copytree(REPO_ROOT / "docs", root / "docs")
    return root


def test_readme_and_docs_agree_with_the_results_files() -> None:
    assert problems() == []


def test_the_pages_quote_every_benchmark_through_a_block() -> None:
    names = {m.group(1) for page in [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")]
             for m in BLOCK.finditer(page.read_text())}
    assert {"main_output", "glance", "collector", "saturation", "http_clients", "nemo_gym_reference", "aggregate",
            "experience", "async_collector", "benchmark_runs"} <= names


def test_a_figure_edited_by_hand_is_caught_and_rewritten(tmp_path: Path) -> None:
    root = _copy_pages(tmp_path)
    before = problems(root)
    page = root / "docs" / "performance.md"
    text = page.read_text()
    block = next(m for m in BLOCK.finditer(text) if m.group(1) == "saturation")
    page.write_text(text[:block.start(2)] + block.group(2).replace("**", "**9", 1) + text[block.end(2):])
    line = text[:block.start()].count("\n") + 1
    assert set(problems(root)) - set(before) == {
        f"docs/performance.md:{line}: block saturation differs from its results file"}
    assert page in write(root)
    assert page.read_text() == text
    assert problems(root) == before


def test_a_rate_written_outside_a_block_is_refused(tmp_path: Path) -> None:
    root = _copy_pages(tmp_path)
    before = problems(root)
    with open(root / "README.md", "a") as readme:
        readme.write("\nIt collects 5,000 rollouts/s on a laptop.\n")
    assert set(problems(root)) - set(before) == {
        "README.md: '5,000 rollouts/s' is written by hand; quote it through a figure block"}


def test_a_factor_or_a_time_its_cited_results_file_does_not_hold_is_refused(tmp_path: Path) -> None:
    root = _copy_pages(tmp_path)
    before = problems(root)
    held = load("chaos")["faults"][0]["throughput_vs_healthy"]
    with open(root / "docs" / "performance.md", "a") as page:
        page.write(f"\nA sick replica costs nothing: {held:.3f}x the healthy fleet "
                   "(`benchmarks/results/chaos.json`).\n")
        page.write("\nA sick replica costs nothing: 9.8765x the healthy fleet, ejected in 987.654 ms "
                   "(`benchmarks/results/chaos.json`).\n")
        page.write("\nThe goal is 0.3x, a setting and not a measurement.\n<!-- context -->\n")
    line = (REPO_ROOT / "docs" / "performance.md").read_text().count("\n") + 4  # the second paragraph added
    refused = "is written by hand and no results file its paragraph cites holds it"
    assert sorted(set(problems(root)) - set(before)) == sorted(
        f"docs/performance.md:{line}: '{figure}' {refused}: quote it through a figure block, cite the file, or mark "
        f"the paragraph <!-- context -->" for figure in ("9.8765x", "987.654 ms"))


def test_the_runner_lists_every_benchmark_and_each_is_a_module() -> None:
    listed = subprocess.run([sys.executable, "-m", "benchmarks.perf", "--list"], cwd=REPO_ROOT, capture_output=True,
                            text=True, check=True).stdout.split("\n")
    assert [line.split()[0] for line in listed if line] == list(BENCHMARKS)
    for name in BENCHMARKS:
        assert (REPO_ROOT / "benchmarks" / "perf" / f"{name}.py").exists(), name


def test_a_figure_in_a_docstring_or_comment_needs_its_results_file_or_a_listed_reason(tmp_path: Path) -> None:
    root = _copy_pages(tmp_path)
    before = problems(root)
    module = root / "nemo_gym" / "planted.py"
    module.parent.mkdir()
    held = load("chaos")["faults"][0]["throughput_vs_healthy"]
    module.write_text(f'"""Replay makes a run 9.87x cheaper.\n\nA sick replica costs {held:.3f}x the healthy fleet\n'
                      '(benchmarks/results/chaos.json)."""\n\nTIMEOUT_S = 1.0  # a call takes 12.5 ms\n'
                      'HEX = 0x1F  # neither 0x1F nor an http_5xx is a factor\n')
    # A listed figure that is gone from its file is named too: the entry would excuse the next one written there.
    listed = root / "nemo_gym" / "config" / "model_servers.py"
    listed.parent.mkdir()
    listed.write_text((REPO_ROOT / "nemo_gym/config/model_servers.py").read_text().replace("3x", "three times"))
    refused = "is written by hand and no results file its paragraph cites holds it: quote it through a figure " \
              "block, cite the file, or list it in readme_figures.CODE_CONTEXT with why"
    assert sorted(set(problems(root)) - set(before)) == [
        "nemo_gym/config/model_servers.py: readme_figures.CODE_CONTEXT lists '3x', which it no longer has",
        f"nemo_gym/planted.py:1: '9.87x' {refused}",
        f"nemo_gym/planted.py:6: '12.5 ms' {refused}"]
