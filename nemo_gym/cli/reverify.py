r"""ng_reverify_rollouts: verify the rollouts of a finished run again, without the model, into a new run.

    ng_reverify_rollouts +input_jsonl_fpath=results/rollouts.jsonl +output_jsonl_fpath=results/reverified.jsonl \
        +failed_only=true

Needs the run's environments and agents running (ng_run with the same configs); the policy model is never called.
+failed_only=true verifies again only the rollouts whose verification failed (e.g. their judge was down or answered
garbage) and copies the others; without it every rollout is verified again (e.g. after changing a judge prompt).

Exit status as ng_collect_rollouts: 0 every rollout verified, 1 some verifications (or rollouts that failed before
verification, which only a collection can redo) are still failed, or a server could not be reached, 2 bad config
or input, 130 interrupted (resume with +resume_from_cache=true).
"""

from nemo_gym.cli.common import CommandHelp, load_config, run_cli, stop_on_sigterm_like_ctrl_c
from nemo_gym.config.global_settings import LoaderSettings
from nemo_gym.rollout_collection.config import RolloutReverificationConfig
from nemo_gym.rollout_collection.reverify import reverify_rollouts
from nemo_gym.sync_bridge import run_sync


def main_args(argv: list[str]) -> int:
    config = RolloutReverificationConfig.from_global(load_config(argv, require_complete=False))
    stop_on_sigterm_like_ctrl_c()
    return 0 if run_sync(reverify_rollouts(config)).ok else 1


HELP = CommandHelp("ng_reverify_rollouts", __doc__, [("Options", RolloutReverificationConfig, ""),
                                                     ("Config loading", LoaderSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)
