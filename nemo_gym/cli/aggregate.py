"""ng_aggregate_rollouts: merge rollout shards (e.g. one per SLURM array task) and compute metrics over their union.

    ng_aggregate_rollouts +input_glob='results/rollouts_shard*.jsonl' +output_jsonl_fpath=results/rollouts.jsonl

With +merge_shards=true (default) the shards are written to output_jsonl_fpath once per key, ordered by key, and
their outstanding failures to <output stem>_failures.jsonl. Identical copies of a key are dropped with a warning;
differing copies are an error naming both files. Metrics are computed exactly as at the end of ng_collect_rollouts
(library metrics plus each environment's, through its agent's /aggregate_metrics: the run's servers should be
running, started by ng_run with the run's configs) and go to <output stem>_aggregate_metrics.json and
<output stem>_report.html; the headline metrics of each agent are printed.

Without servers (no head server answers, or an agent does not), the merged file, the library metrics (mean reward,
pass@k, majority@k, per-task statistics) and the report are still written, without that environment's own metrics;
the command says so in its last line and exits 1.

Exit status: 0 done, 1 a server failed or could not be reached (run it again once they are up), 2 bad input (no
matching files, malformed rows, shards from different runs).
"""

from nemo_gym.cli.common import CommandHelp, run_cli, load_config
from nemo_gym.config.global_settings import LoaderSettings
from nemo_gym.rollout_collection import RolloutAggregationConfig, RolloutAggregationHelper
from nemo_gym.sync_bridge import run_sync


def main_args(argv: list[str]) -> int:
    config = RolloutAggregationConfig.from_global(load_config(argv, require_complete=False))
    run_sync(RolloutAggregationHelper().run_from_config(config))
    return 0


HELP = CommandHelp("ng_aggregate_rollouts", __doc__, [("Options", RolloutAggregationConfig, ""),
                                                      ("Config loading", LoaderSettings, "")])


def main() -> None:
    run_cli(main_args, HELP)
