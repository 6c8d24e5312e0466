"""ng_collect_rollouts: run every row of an input JSONL through its agent and write the scored rollouts.

    ng_collect_rollouts +agent_name=math_simple_agent +input_jsonl_fpath=data/x.jsonl \
        +output_jsonl_fpath=out/r.jsonl +num_repeats=4 +num_samples_in_parallel=64

Exit status: 0 all rollouts collected, 1 some failed (see <stem>_failures.jsonl) or aggregation failed,
2 bad config or input (nothing was run), 130 interrupted (resume with +resume_from_cache=true).
"""

import signal

from nemo_gym.cli.common import run_cli
from nemo_gym.config import load_global_config
from nemo_gym.rollout_collection import RolloutCollectionConfig, collect_rollouts, run_async


def _sigterm_as_sigint(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)


def main_args(argv: list[str]) -> int:
    config = RolloutCollectionConfig.from_global(load_global_config(argv, require_complete=False))
    # SIGTERM (scancel, SLURM preemption) stops like Ctrl-C: finished rollouts are already on disk. It is re-raised
    # as SIGINT so asyncio's Runner cancels the run; a KeyboardInterrupt raised inside a uvloop transport callback
    # would be swallowed there and the run would go on. SIGINT is (re)armed as well, since a shell starts background
    # jobs with it ignored, and an ignored SIGINT would then make SIGTERM a no-op.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _sigterm_as_sigint)
    return 0 if run_async(collect_rollouts(config)).ok else 1


def main() -> None:
    run_cli(main_args)
