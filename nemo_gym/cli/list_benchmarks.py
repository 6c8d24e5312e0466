"""ng_list_benchmarks: every benchmark folder with its environment, its datasets' row counts, and its path.

    ng_list_benchmarks

A dataset not prepared yet shows as `not prepared` (run ng_prepare_benchmark +benchmark=<name>). A benchmark whose
config.yaml cannot be read is listed with the error, and the exit status is 2 (bad input).
"""

from nemo_gym import console
from nemo_gym.benchmark_layout import BenchmarkInfo, describe, find_benchmarks
from nemo_gym.benchmark_layout.discover import candidate_dirs, shown
from nemo_gym.cli.common import CommandHelp, print_table, run_cli
from nemo_gym.exit_status import EXIT_BAD_INPUT
from nemo_gym.errors import ConfigError, NemoGymError


def _splits(info: BenchmarkInfo) -> str:
    parts = [f"{d.type}: {'not prepared' if d.rows is None else f'{d.rows} rows'}" for d in info.datasets]
    return ", ".join(parts) or "no datasets"


def main_args(argv: list[str]) -> int:
    if argv:
        raise ConfigError(f"ng_list_benchmarks takes no options, got {' '.join(argv)}")
    benchmarks = find_benchmarks()
    if not benchmarks:
        console.say(f"no benchmarks found (looked in {' and '.join(shown(d) for d in candidate_dirs())})")
        return 0
    rows, broken = [], 0
    for benchmark in benchmarks.values():
        row = {"name": benchmark.name, "path": shown(benchmark.folder)}
        try:
            info = describe(benchmark)
            row.update(environment=", ".join(info.environments) or "none", splits=_splits(info))
        except NemoGymError as exc:
            broken += 1
            row.update(environment="?", splits=f"error: {exc}")
        rows.append(row)
    print_table(rows, ["name", "environment", "splits", "path"])
    return EXIT_BAD_INPUT if broken else 0


HELP = CommandHelp("ng_list_benchmarks", __doc__)


def main() -> None:
    run_cli(main_args, HELP)
