"""The README's main command, `bash scripts/main.sh`, timed after setup (NEMO_GYM_SKIP_SETUP=1: the install step is
timed by nobody here, and rerun from a worktree it would repoint a shared editable install): vLLM cold start with
the bundled model, 50 rollouts of the example arithmetic dataset, aggregation, stop.

    .venv/bin/python -m benchmarks.perf.main_command [--quick]

Output, head-server port and logs go to a scratch folder; everything else is the command as documented. Records the
wall time, the collection's own time (the share of the wall time it is), the CPU's bf16 support (vLLM runs
float32 without it) and the command's output, which the README shows. Writes benchmarks/results/main_command.json.
"""

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.perf.lifecycle import run_child
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, load_average, recording
from nemo_gym.jsonl_records import iter_records
from nemo_gym.responses_api_models.local_vllm_model.dtype import default_vllm_dtype
from nemo_gym.server.supervisor import free_port

_DONE = re.compile(r"done: (\d+) rollouts collected in ([\d.]+) s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="+limit=10")
    args = parser.parse_args()
    with recording("main_command", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ng_main_") as tmp:
        output = Path(tmp) / "math_rollouts.jsonl"
        extra = [f"+head_server.port={free_port()}", f"+log_dir={tmp}/logs", f"+output_jsonl_fpath={output}",
                 *(["+limit=10"] if args.quick else [])]
        started = time.monotonic()
        result = run_child(["bash", "scripts/main.sh", *extra], cwd=REPO_ROOT, timeout_s=1800, merge_stderr=True,
                           env={**os.environ, "NEMO_GYM_SKIP_SETUP": "1"})
        wall = time.monotonic() - started
        sys.stdout.write(result.stdout)
        done = _DONE.search(result.stdout)
        if result.returncode != 0 or done is None:
            raise BenchmarkFailed(f"scripts/main.sh exited {result.returncode}:\n{result.stdout[-3000:]}")
        rows = [row for _, row in iter_records(output)]
        collection_s = float(done.group(2))
        recorder.write({"collection_share_of_wall": round(collection_s / wall, 3)}, {
            "settings": {"command": "NEMO_GYM_SKIP_SETUP=1 bash scripts/main.sh", "overrides": extra,
                         "vllm_dtype": default_vllm_dtype()},
            "command_wall_s": round(wall, 1), "collection_s": collection_s, "rollouts": len(rows),
            "mean_reward": round(sum(row["reward"] for row in rows) / len(rows), 3),
            "load_average_at_end": load_average(),
            # What a user sees (stdout and stderr as a terminal shows them), with the scratch folder named <tmp>.
            "output": result.stdout.replace(tmp, "<tmp>")})


if __name__ == "__main__":
    main()
