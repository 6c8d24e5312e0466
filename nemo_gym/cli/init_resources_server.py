"""ng_init_resources_server: create a new environment folder that ng_run starts and ng_collect_rollouts scores.

    ng_init_resources_server +name=my_env [+output_dir=resources_servers]

Writes `<output_dir>/<name>/` (default `resources_servers/<name>/`, where NeMo Gym keeps one folder per environment)
with app.py, configs/<name>.yaml, data/example.jsonl, tests/ and a README. Paths inside it are relative to the
current directory, where the ng_* commands are then run.
"""

import shutil
from pathlib import Path

from nemo_gym import console
from nemo_gym.cli.common import CommandHelp, run_cli
from nemo_gym.config.loader import parse_overrides
from nemo_gym.config.typed import Settings, Text
from nemo_gym.scaffold import ScaffoldError, create_environment, model_config_path

DEFAULT_OUTPUT_DIR = "resources_servers"


class InitSettings(Settings):
    name: Text
    """The new environment's name (a Python identifier), e.g. my_env."""
    output_dir: Text = DEFAULT_OUTPUT_DIR
    """Folder that gets <name>/."""


OPTIONS = tuple(InitSettings.model_fields)


def main_args(argv: list[str]) -> int:
    options = dict(parse_overrides(argv))
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ScaffoldError(f"unknown option +{unknown[0]}=...; ng_init_resources_server takes +name=... "
                            "and optionally +output_dir=...")
    if "name" not in options:
        raise ScaffoldError("missing +name=...: the new environment's name, e.g. +name=my_env")
    env_dir = create_environment(options["name"], Path(str(options.get("output_dir", DEFAULT_OUTPUT_DIR))), Path.cwd())
    name = env_dir.name
    console.say(f"created {env_dir}/: app.py, configs/{name}.yaml, data/example.jsonl, tests/, README.md")
    console.say(f"next: pytest {env_dir}    # its own test: ng_run + ng_collect_rollouts with a scripted model")
    if shutil.which("pytest") is None:
        console.say("      (there is no pytest on PATH: pip install pytest, or nemo_gym's dev extra)")
    console.say(f'      ng_run "+config_paths=[{env_dir}/configs/{name}.yaml,{model_config_path(Path.cwd())}]"')
    return 0


HELP = CommandHelp("ng_init_resources_server", __doc__, [("Options", InitSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)
