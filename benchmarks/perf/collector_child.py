"""`ng_collect_rollouts` with a machine-readable last line: the run's figures and this process's peak RSS.

    python -m benchmarks.perf.collector +head_server_url=... +input_jsonl_fpath=... (the usual overrides)
"""

import json
import resource
import sys

from benchmarks.perf.memory import peak_rss_mb
from nemo_gym.config import load_global_config
from nemo_gym.rollout_collection import RolloutCollectionConfig, collect_rollouts
from nemo_gym.sync_bridge import run_sync

RESULT_PREFIX = "BENCH_RESULT "


def main() -> None:
    config = RolloutCollectionConfig.from_global(load_global_config(sys.argv[1:], require_complete=False))
    summary = run_sync(collect_rollouts(config))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result = {
        "succeeded": summary.succeeded,
        "failed": summary.failed,
        "elapsed_s": round(summary.elapsed_s, 2),
        "rollouts_per_s": round(summary.rollouts_per_s, 1),
        "peak_rss_mb": peak_rss_mb(),
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
