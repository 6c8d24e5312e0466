r"""ng_collect_rollouts: run every row of an input JSONL through its agent and write the scored rollouts.

    ng_collect_rollouts +agent_name=math_simple_agent +input_jsonl_fpath=nemo_gym/resources_servers/math/data/arithmetic_example.jsonl \
        +output_jsonl_fpath=out/r.jsonl +num_repeats=4 +num_samples_in_parallel=64

Exit status: 0 all rollouts collected, 1 some failed (see <stem>_failures.jsonl), aggregation failed or a server
(the head server included) could not be reached, 2 bad config or input (nothing was run), 75 a model endpoint
refuses to serve for longer than its model server waits (a spent quota: resume with +resume_from_cache=true once it
serves again), 130 interrupted (resume with +resume_from_cache=true).
"""

from nemo_gym.cli.common import CommandHelp, run_cli, stop_on_sigterm_like_ctrl_c, load_config
from nemo_gym.config.global_settings import LoaderSettings
from nemo_gym.rollout_collection import RolloutCollectionConfig, RolloutCollectionHelper
from nemo_gym.sync_bridge import run_sync
from nemo_gym.traces.start import start_for_command


def main_args(argv: list[str]) -> int:
    global_config = load_config(argv, require_complete=False)
    config = RolloutCollectionConfig.from_global(global_config)
    start_for_command(global_config.values, HELP.command)
    # Finished rollouts are already on disk, so a stop only loses the ones in flight; the next run resumes them.
    stop_on_sigterm_like_ctrl_c()
    return run_sync(RolloutCollectionHelper().run_from_config(config)).exit_status


HELP = CommandHelp("ng_collect_rollouts", __doc__, [("Options", RolloutCollectionConfig, ""),
                                                    ("Config loading", LoaderSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)
