"""Where the benchmarks are: every folder `benchmarks/<name>/` holding both `config.yaml` and `prepare.py`.

Users run the ng_* commands from the repository root, so `benchmarks/` is looked for in the current directory
first, then in the repository that holds this nemo_gym (an editable install). The performance scripts
(`benchmarks/perf/`) and their results (`benchmarks/results/`) hold neither file, so they are not benchmarks.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import nemo_gym
from nemo_gym.errors import ConfigError

BENCHMARKS_DIR = "benchmarks"
CONFIG_FILE = "config.yaml"
PREPARE_FILE = "prepare.py"
DATA_DIR = "data"


@dataclass(frozen=True)
class Benchmark:
    name: str
    folder: Path

    @property
    def root(self) -> Path:
        """The repository root: paths inside config.yaml are relative to it."""
        return self.folder.parent.parent

    @property
    def config_path(self) -> Path:
        return self.folder / CONFIG_FILE

    @property
    def prepare_path(self) -> Path:
        return self.folder / PREPARE_FILE

    @property
    def default_output_dir(self) -> Path:
        return self.folder / DATA_DIR


def is_benchmark_folder(folder: Path) -> bool:
    return (folder / CONFIG_FILE).is_file() and (folder / PREPARE_FILE).is_file()


def _benchmarks_in(directory: Path) -> dict[str, Benchmark]:
    if not directory.is_dir():
        return {}
    return {
        folder.name: Benchmark(folder.name, folder)
        for folder in sorted(directory.iterdir())
        if folder.is_dir() and not folder.name.startswith((".", "_")) and is_benchmark_folder(folder)
    }


def candidate_dirs(cwd: Path | None = None) -> list[Path]:
    """The benchmarks folders looked at, in order: the current directory's, then the installed repository's."""
    here = (cwd or Path.cwd()).absolute() / BENCHMARKS_DIR
    installed = Path(nemo_gym.__file__).resolve().parents[1] / BENCHMARKS_DIR
    return [here] if installed == here.resolve() else [here, installed]


def find_benchmarks(cwd: Path | None = None) -> dict[str, Benchmark]:
    """The benchmarks of the first candidate folder that has any, by name (empty when none has)."""
    for directory in candidate_dirs(cwd):
        found = _benchmarks_in(directory)
        if found:
            return found
    return {}


def find_benchmark(name: str, cwd: Path | None = None) -> Benchmark:
    found = find_benchmarks(cwd)
    if name not in found:
        looked = " and ".join(shown(d) for d in candidate_dirs(cwd))
        raise ConfigError(f"unknown benchmark '{name}' (known: {', '.join(found) or 'none'}; looked in {looked})")
    return found[name]


def benchmark_holding(path: Path) -> str | None:
    """The benchmark whose folder holds `path` (which need not exist), e.g. arithmetic for
    benchmarks/arithmetic/data/arithmetic.jsonl; None for a file outside every benchmark."""
    for folder in Path(path).absolute().parents:
        if folder.parent.name == BENCHMARKS_DIR and is_benchmark_folder(folder):
            return folder.name
    return None


def shown(path: Path) -> str:
    """`path` relative to the current directory when it lies below it (as users typed it), else absolute."""
    absolute = Path(path).absolute()
    try:
        return str(absolute.relative_to(Path.cwd().absolute()))
    except ValueError:
        return os.fspath(absolute)
