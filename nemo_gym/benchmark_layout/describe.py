"""What ng_list_benchmarks shows of a benchmark: its environments and its datasets with their prepared row counts.

The benchmark's config.yaml is read alone through the project's config loader; it names a model server
(`policy_model`) that another file supplies at run time, so references are not checked here.
"""

from dataclasses import dataclass
from pathlib import Path

from nemo_gym.benchmark_layout.discover import Benchmark
from nemo_gym.config.loader import load_global_config
from nemo_gym.config.servers import server_specs
from nemo_gym.run_files.rows import count_rows

AGENT_KIND = "responses_api_agents"
RESOURCES_KIND = "resources_servers"


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    type: str
    path: Path
    rows: int | None  # None: not prepared yet


@dataclass(frozen=True)
class BenchmarkInfo:
    benchmark: Benchmark
    environments: list[str]  # the resources server implementations its config starts
    datasets: list[DatasetInfo]


def _rows_if_present(path: Path) -> int | None:
    """Non-blank lines of a JSONL file, or None when it does not exist."""
    return count_rows(path) if path.is_file() else None


def describe(benchmark: Benchmark) -> BenchmarkInfo:
    relative = benchmark.config_path.relative_to(benchmark.root)
    config = load_global_config([f"+config_paths=[{relative}]"], cwd=benchmark.root, require_complete=False)
    specs = server_specs(config.values).values()
    environments = sorted({spec.implementation for spec in specs if spec.kind == RESOURCES_KIND})
    datasets = []
    for spec in specs:
        entries = spec.settings.get("datasets") if spec.kind == AGENT_KIND else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("jsonl_fpath"):
                path = benchmark.root / str(entry["jsonl_fpath"])
                datasets.append(DatasetInfo(str(entry.get("name", "")), str(entry.get("type", "?")), path,
                                            _rows_if_present(path)))
    return BenchmarkInfo(benchmark, environments, datasets)
