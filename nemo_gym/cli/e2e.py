r"""ng_e2e_collect_rollouts: start the servers of the given configs, collect rollouts over every agent's dataset
of one split, aggregate metrics, and stop the servers.

    ng_e2e_collect_rollouts "+config_paths=[benchmarks/arithmetic/config.yaml,configs/vllm_model.yaml]" \
        +split=benchmark +output_jsonl_fpath=results/arithmetic.jsonl +num_repeats=4

A dataset entry's own `num_repeats` and `prompt_config` apply to its rows, over +num_repeats and +prompt_config.

Exit status as ng_collect_rollouts.
"""

from nemo_gym.cli.common import CommandHelp, run_cli, stop_on_sigterm_like_ctrl_c, load_config
from nemo_gym.config.global_settings import LoaderSettings, ServerProcessSettings
from nemo_gym.config.shortcuts import ModelShortcuts
from nemo_gym.rollout_collection import E2ERolloutCollectionConfig, e2e_collect_rollouts
from nemo_gym.traces.start import start_for_command


def main_args(argv: list[str]) -> int:
    global_config = load_config(argv)
    config = E2ERolloutCollectionConfig.from_global(global_config)
    start_for_command(global_config.values, HELP.command)
    # SIGTERM (e.g. scancel) takes the same path as Ctrl-C, so the servers are stopped on the way out.
    stop_on_sigterm_like_ctrl_c()
    return e2e_collect_rollouts(config, global_config).exit_status


HELP = CommandHelp("ng_e2e_collect_rollouts", __doc__, [("Options", E2ERolloutCollectionConfig, ""),
                                                        ("Policy model shortcuts", ModelShortcuts, ""),
                                                        ("Servers", ServerProcessSettings, ""),
                                                        ("Config loading", LoaderSettings, "")],
                   notes="Each server's settings: see docs/configuration.md.")


def main() -> None:
    run_cli(main_args, HELP)
