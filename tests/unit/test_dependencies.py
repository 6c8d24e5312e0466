"""pyproject's runtime dependencies are exactly the distributions the shipped code imports: nothing undeclared
(a fresh install would fail at import time), nothing declared and unused (every user would install it for nothing).

The shipped code is nemo_gym/ (without each server's tests/ folder) and the benchmark folders ng_prepare_benchmark
runs (benchmarks/<name>/*.py; the benchmarks/perf harness is development tooling, covered by the dev extra).
"""

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OWN_PACKAGES = {"nemo_gym", "benchmarks", "tests"}
# Modules found by name at run time rather than by an import statement.
_BY_NAME_CALLS = {"import_module", "files", "find_spec"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(group: str | None = None) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] if group is None else project["optional-dependencies"][group]
    return {_normalize(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in requirements}


def _shipped_sources() -> list[Path]:
    # A server's tests/ folder is not shipped (pyproject excludes it from the wheel): its imports are dev ones.
    package = [p for p in (REPO / "nemo_gym").rglob("*.py") if "tests" not in p.relative_to(REPO).parts]
    benchmarks = [p for p in (REPO / "benchmarks").glob("*/*.py") if p.parent.name != "perf"]
    return sorted(package) + sorted(benchmarks)


def _top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _BY_NAME_CALLS and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and not node.args[0].value.startswith(".")):
            names.add(node.args[0].value.split(".")[0])
    return names


def _third_party_imports() -> dict[str, list[str]]:
    """Import name -> files importing it, for every import that is neither the standard library nor ours."""
    found: dict[str, list[str]] = {}
    for path in _shipped_sources():
        for name in _top_level_imports(path):
            if name not in sys.stdlib_module_names and name not in OWN_PACKAGES:
                found.setdefault(name, []).append(str(path.relative_to(REPO)))
    return found


@functools.cache
def _providers() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # slow: every installed distribution's file list


def _distributions(imports: dict[str, list[str]]) -> dict[str, set[str]]:
    """Import name -> the installed distributions providing it."""
    providers = _providers()
    missing = sorted(name for name in imports if name not in providers)
    assert not missing, f"imported but not installed (so not declared either): {missing}"
    return {name: {_normalize(d) for d in providers[name]} for name in imports}


def test_every_imported_distribution_is_declared() -> None:
    imports = _third_party_imports()
    declared = _declared()
    providers = _distributions(imports)
    undeclared = {name: files for name, files in imports.items() if not providers[name] & declared}
    assert not undeclared, f"add to pyproject's dependencies (import name -> files): {undeclared}"


def test_every_declared_dependency_is_imported() -> None:
    provided = set().union(*_distributions(_third_party_imports()).values())
    unused = sorted(_declared() - provided)
    assert not unused, f"declared in pyproject's dependencies but imported by no shipped module: {unused}"


def test_test_only_packages_are_dev_dependencies() -> None:
    dev, runtime = _declared("dev"), _declared()
    assert "psutil" in dev and "psutil" not in runtime  # tests and benchmarks/perf only
    assert not dev & runtime
