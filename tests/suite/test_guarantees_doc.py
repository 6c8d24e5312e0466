"""docs/guarantees.md cites, for each guarantee, a test that exists; and every reliability test backs a guarantee."""

import ast
import re
import subprocess
import sys

from tests.helpers.stack import REPO_ROOT

DOC = REPO_ROOT / "docs" / "guarantees.md"
CITATION = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _table_rows() -> list[str]:
    lines = DOC.read_text().splitlines()
    return [line for line in lines if line.startswith("| **")]


def _citations() -> list[tuple[str, str]]:
    return CITATION.findall(DOC.read_text())


def test_every_guarantee_row_cites_a_test() -> None:
    rows = _table_rows()
    assert len(rows) >= 6, f"expected the guarantees table in {DOC}"
    for row in rows:
        assert CITATION.search(row), f"a guarantee without a cited test: {row[:120]}"


def test_every_cited_test_is_collected() -> None:
    cited = sorted({f"{path}::{name}" for path, name in _citations()})
    for node in cited:
        assert (REPO_ROOT / node.split("::")[0]).is_file(), f"{DOC.name} cites a missing file: {node}"
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *cited],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = {line.split("[")[0] for line in done.stdout.splitlines() if "::" in line}
    assert set(cited) <= collected, f"cited but not collected: {set(cited) - collected}"


def test_every_reliability_test_backs_a_guarantee() -> None:
    cited = set(_citations())
    for path in sorted((REPO_ROOT / "tests" / "reliability").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                rel = str(path.relative_to(REPO_ROOT))
                assert (rel, node.name) in cited, f"{rel}::{node.name} is not cited in {DOC.name}"
