"""README.md and docs/*.md quote performance figures only inside figure blocks rendered from benchmarks/results/.

    python -m benchmarks.perf.readme_figures --check    # exit 1 naming each block that disagrees with its file
    python -m benchmarks.perf.readme_figures --write    # re-render every block from the results files

A block is `<!-- figures:NAME -->` ... `<!-- /figures:NAME -->` (names: benchmarks.perf.figure_tables.RENDERERS).
The check also refuses, in README.md and in the docs pages this project's benchmarks own, a rate (rollouts/s,
requests/s, tokens/s) written by hand outside a block, and a factor ("2.28x") or a time in milliseconds ("0.8 ms")
written by hand in a paragraph that neither cites a results file holding that number (`benchmarks/results/...json`,
to the figure's precision; a time also as seconds) nor is marked `<!-- context -->` (a setting, a fault's definition,
a one-off measurement said to be one).

The docstrings and comments of the Python code (`nemo_gym/`, `examples/`, `benchmarks/`, tests aside) are held to the
same rule for factors and times in milliseconds, paragraph by paragraph; one that is not a measurement (a setting, a
goal, a format's example) is listed in `CODE_CONTEXT` with the reason.
"""

import argparse
import ast
import functools
import json
import re
import sys
import tokenize
from io import StringIO
from pathlib import Path
from typing import Any, Iterator

from benchmarks.perf.figure_tables import RENDERERS, load
from benchmarks.perf.results import REPO_ROOT

BLOCK = re.compile(r"<!-- figures:(\w+) -->\n(.*?)<!-- /figures:\1 -->", re.S)
# Pages whose every rate must come from a block; other helpers' pages under docs/ are only scanned for blocks.
OWNED = ("README.md", "docs/performance.md", "docs/trainers.md", "docs/benchmarks.md", "docs/metrics.md",
         "docs/collection.md", "docs/protocol.md", "docs/environments.md", "docs/slurm.md")
HAND_RATE = re.compile(r"\d[\d,.]*\s*(?:rollouts/s|requests/s|req/s|tok/s|tokens/s)")
FENCE = re.compile(r"```.*?```", re.S)
HAND_FACTOR = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s?[x×](?!\w)")
HAND_TIME = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s?(ms|µs)\b")
RESULTS_CITED = re.compile(r"benchmarks/results/[\w/.-]+?\.json")
CONTEXT = "<!-- context -->"
_TIME_TO_S = {"ms": 1e-3, "µs": 1e-6}
CODE_FOLDERS = ("nemo_gym", "examples", "benchmarks")
# (file, figure as written): why a figure in a docstring or comment is not a measurement a results file must hold.
CODE_CONTEXT = {
    ("nemo_gym/config/model_servers.py", "3x"): "a setting: how far past its peers' share of failures ejects",
    ("nemo_gym/experience/collector/config.py", "2 x"): "a default's formula",
    ("nemo_gym/responses_api_models/endpoint_calls.py", "20ms"): "an example of a 429's wait as OpenAI writes it",
    ("nemo_gym/server/gc_pace.py", "0.40 ms"): "a one-off measurement, said to be one in docs/performance.md",
    ("nemo_gym/server/gc_pace.py", "0.05 ms"): "a one-off measurement, said to be one in docs/performance.md",
    ("benchmarks/perf/async_collector.py", "50 ms"): "a benchmark's polling interval",
    ("benchmarks/perf/grpo_async_vs_sync.py", "1.6x"): "a benchmark's goal",
    ("benchmarks/perf/experience.py", "1.5x"): "a benchmark's goal",
    ("benchmarks/perf/fleet.py", "2x"): "a benchmark's setting: the slow replica's factor",
    ("benchmarks/fleet/workload.py", "1.65x"): "arithmetic of a setting: a lognormal's mean over its median",
    ("benchmarks/fleet/profile.py", "18.4 ms"): "a cross-check of a published profile, not our measurement",
}


def pages(root: Path = REPO_ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def render(name: str) -> str:
    if name not in RENDERERS:
        raise KeyError(f"unknown figure block {name!r}; known: {', '.join(RENDERERS)}")
    results, renderer = RENDERERS[name]
    return renderer(load(results)).rstrip("\n") + "\n"


def rewrite(text: str) -> str:
    """Every block re-rendered; one that cannot be (no results file yet) is left as it is and `problems` names it."""

    def block(match: re.Match) -> str:
        try:
            return f"<!-- figures:{match.group(1)} -->\n{render(match.group(1))}<!-- /figures:{match.group(1)} -->"
        except (KeyError, ValueError, FileNotFoundError):
            return match.group(0)

    return BLOCK.sub(block, text)


def problems(root: Path = REPO_ROOT) -> list[str]:
    """Every disagreement: a block whose text is not what its results file renders, a rate written by hand."""
    found = []
    for page in pages(root):
        rel = page.relative_to(root).as_posix()
        text = page.read_text()
        for match in BLOCK.finditer(text):
            try:
                expected = render(match.group(1))
            except (KeyError, ValueError, FileNotFoundError) as error:
                found.append(f"{rel}: block {match.group(1)}: {error}")
                continue
            if match.group(2) != expected:
                line = text[:match.start()].count("\n") + 1
                found.append(f"{rel}:{line}: block {match.group(1)} differs from its results file")
        if rel in OWNED:
            outside = FENCE.sub("", BLOCK.sub("", text))
            for rate in HAND_RATE.finditer(outside):
                found.append(f"{rel}: '{rate.group(0)}' is written by hand; quote it through a figure block")
            blanked = FENCE.sub(_blank, BLOCK.sub(_blank, text))  # the same lines, without blocks and code
            found += [f"{rel}:{line}: {_refusal(figure)}mark the paragraph {CONTEXT}"
                      for line, figure in _unbacked_figures(blanked)]
    return found + _code_problems(root)


def _refusal(figure: str) -> str:
    return (f"'{figure}' is written by hand and no results file its paragraph cites holds it: quote it through a "
            "figure block, cite the file, or ")


def _code_problems(root: Path) -> list[str]:
    found, listed = [], set()
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if "tests" in path.relative_to(root).parts:
                continue
            for line, figure in _unbacked_figures(_prose_of(path.read_text())):
                if (rel, figure) in CODE_CONTEXT:
                    listed.add((rel, figure))
                else:
                    found.append(f"{rel}:{line}: {_refusal(figure)}list it in readme_figures.CODE_CONTEXT with why")
    # An entry that no longer matches would excuse the next figure written there unseen.
    found += [f"{rel}: readme_figures.CODE_CONTEXT lists '{figure}', which it no longer has"
              for rel, figure in CODE_CONTEXT if (rel, figure) not in listed and (root / rel).exists()]
    return found


def _prose_of(source: str) -> str:
    """`source`'s docstrings (every statement that is a string alone) and comments, each at its own lines; every
    other line blank, so that code between two comments parts their paragraphs."""
    lines = source.splitlines()
    kept = [""] * len(lines)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for index in range(node.lineno - 1, node.end_lineno or node.lineno):
                kept[index] = lines[index]
    for token in tokenize.generate_tokens(StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            kept[token.start[0] - 1] = token.string
    return "\n".join(kept)


def _blank(match: re.Match) -> str:
    return "\n" * match.group(0).count("\n")


def _unbacked_figures(text: str) -> Iterator[tuple[int, str]]:
    """(line, figure) for each factor and time in milliseconds of `text` (a page, its blocks blanked) that no
    results file its paragraph cites holds, in paragraphs not marked as context."""
    for paragraph in re.finditer(r"(?:[^\n]*\S[^\n]*(?:\n|$))+", text):
        if CONTEXT in paragraph.group(0):
            continue
        figures = [(m, 1.0) for m in HAND_FACTOR.finditer(paragraph.group(0))]
        figures += [(m, _TIME_TO_S[m.group(2)]) for m in HAND_TIME.finditer(paragraph.group(0))]
        if not figures:
            continue
        numbers = [n for path in sorted(set(RESULTS_CITED.findall(paragraph.group(0)))) for n in _numbers_in(path)]
        for figure, to_s in figures:
            shown = figure.group(1)
            if not any(_rounds_to(n, shown) or (to_s != 1.0 and _rounds_to(n / to_s, shown)) for n in numbers):
                yield text[:paragraph.start() + figure.start()].count("\n") + 1, figure.group(0)


@functools.cache
def _numbers_in(cited: str) -> tuple[float, ...]:
    path = REPO_ROOT / cited
    if not path.exists():
        return ()

    def walk(value: Any) -> Iterator[float]:
        if isinstance(value, bool):
            return
        if isinstance(value, (int, float)):
            yield float(value)
        elif isinstance(value, dict):
            for item in value.values():
                yield from walk(item)
        elif isinstance(value, list):
            for item in value:
                yield from walk(item)

    return tuple(walk(json.loads(path.read_text())))


def _rounds_to(value: float, shown: str) -> bool:
    """Whether `value` is `shown` (a figure as written, with its thousands commas) at the figure's precision."""
    shown = shown.replace(",", "")
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return abs(value - float(shown)) <= 0.5 * 10 ** -decimals + 1e-12


def write(root: Path = REPO_ROOT) -> list[Path]:
    """Re-render every block in place; the pages that changed."""
    changed = []
    for page in pages(root):
        text = page.read_text()
        if (new := rewrite(text)) != text:
            page.write_text(new)
            changed.append(page)
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.write:
        for page in write():
            print(f"updated {page.relative_to(REPO_ROOT)}")
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    if not found:
        print("every figure block agrees with benchmarks/results/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
