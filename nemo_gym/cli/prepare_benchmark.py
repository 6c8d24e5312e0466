"""ng_prepare_benchmark: write one benchmark's dataset with its folder's prepare.py and check every row.

    ng_prepare_benchmark +benchmark=arithmetic [+output_dir=DIR] [+seed=0] [+n=50]
    ng_prepare_benchmark +benchmark=gsm8k +source=path/to/gsm8k_test.jsonl

`+benchmark` and `+output_dir` (default `benchmarks/<name>/data/`) are this command's; every other `+key=value` on
the command line is an option of the benchmark's `prepare()`, and one it does not take is an error.
"""

from pathlib import Path
from typing import Any

from pydantic import model_validator

from nemo_gym import console
from nemo_gym.benchmark_layout import find_benchmark, find_benchmarks, prepare_benchmark
from nemo_gym.benchmark_layout.discover import shown
from nemo_gym.cli.common import CommandHelp, run_cli, load_config
from nemo_gym.config.loader import COMMAND_LINE
from nemo_gym.config.typed import Settings, Text, build


class PrepareSettings(Settings):
    benchmark: Text
    """The benchmark's folder name (ng_list_benchmarks lists them)."""
    output_dir: Text | None = None
    """Where the dataset is written (default benchmarks/<name>/data/)."""

    @model_validator(mode="before")
    @classmethod
    def _benchmark_named(cls, data: Any) -> Any:
        # Without a benchmark, the names to choose from are the useful answer.
        if isinstance(data, dict) and not data.get("benchmark"):
            raise ValueError(f"missing +benchmark=<name> (known: {', '.join(find_benchmarks()) or 'none'})")
        return data


OWN_KEYS = tuple(PrepareSettings.model_fields)


def main_args(argv: list[str]) -> int:
    config = load_config(argv, require_complete=False)
    command_line = next(source.cfg for source in config.sources if source.name == COMMAND_LINE)
    settings = build(PrepareSettings, config.values)
    benchmark = find_benchmark(settings.benchmark)
    options = {key: config.values[key] for key in map(str, command_line) if key not in OWN_KEYS}
    prepared = prepare_benchmark(benchmark, Path(settings.output_dir) if settings.output_dir else None, options)
    console.say(f"prepared {benchmark.name}: {prepared.rows} rows in {shown(prepared.path)}")
    return 0


HELP = CommandHelp("ng_prepare_benchmark", __doc__, [("Options", PrepareSettings, "")],
                   notes="Every other +key=value is an option of the benchmark's prepare() (see its prepare.py).")


def main() -> None:
    run_cli(main_args, HELP)
