"""ng_aggregate_rollouts: merge rollout shards (e.g. one per SLURM array task) and compute metrics over their union.

    ng_aggregate_rollouts +input_glob='results/rollouts_shard*.jsonl' +output_jsonl_fpath=results/rollouts.jsonl

With +merge_shards=true (default) the shards are written to output_jsonl_fpath once per key, ordered by key, and
their outstanding failures to <output stem>_failures.jsonl. Identical copies of a key are dropped with a warning;
differing copies are an error naming both files. Metrics are computed exactly as at the end of ng_collect_rollouts
(library metrics plus each environment's, through its agent's /aggregate_metrics: servers must be running) and go to
<output stem>_aggregate_metrics.json and <output stem>_report.html.
"""

from pathlib import Path

from nemo_gym.cli.common import run_cli
from nemo_gym.config import load_global_config
from nemo_gym.errors import NemoGymError
from nemo_gym.http_client import NO_RETRY, HttpClient
from nemo_gym.rollout_collection import (
    RolloutAggregationConfig,
    _expand_input_glob,
    aggregate_rollouts,
    merge_shards,
    run_async,
)
from nemo_gym.server.client import ServerClient

# Files ng_collect_rollouts writes next to its output: never rollouts themselves.
_SIDECAR_SUFFIXES = ("_failures.jsonl", "_materialized_inputs.jsonl", "_inputs.jsonl")


def _input_files(config: RolloutAggregationConfig) -> list[Path]:
    output = Path(config.output_jsonl_fpath).resolve()
    files = []
    for name in _expand_input_glob(config.input_glob):
        path = Path(name)
        if name.endswith(_SIDECAR_SUFFIXES) or (config.merge_shards and path.resolve() == output):
            continue
        files.append(path)
    if not files:
        raise NemoGymError(f"+input_glob={config.input_glob} matches no rollout files")
    return files


async def _aggregate(config: RolloutAggregationConfig, files: list[Path]) -> None:
    http = HttpClient(retry=NO_RETRY)
    try:
        servers = ServerClient(config.head_server_url, http)
        result = await aggregate_rollouts(files, config.aggregate_metrics_fpath, servers)
    finally:
        await http.aclose()
    print(f"metrics: {result.path}\nreport: {result.report_path}", flush=True)


def main_args(argv: list[str]) -> int:
    config = RolloutAggregationConfig.from_global(load_global_config(argv, require_complete=False))
    files = _input_files(config)
    print(f"aggregating {len(files)} file(s): {', '.join(map(str, files))}", flush=True)
    if config.merge_shards:
        output = Path(config.output_jsonl_fpath)
        output.parent.mkdir(parents=True, exist_ok=True)
        stats = merge_shards(files, output)
        dropped = f"; dropped {stats.duplicates} duplicate rollouts" if stats.duplicates else ""
        failed = f"; {stats.failures} outstanding failures" if stats.failures else ""
        print(f"merged {stats.rows} rollouts into {output}{dropped}{failed}", flush=True)
        files = [output]
    run_async(_aggregate(config, files))
    return 0


def main() -> None:
    run_cli(main_args)
