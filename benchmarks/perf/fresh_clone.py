"""`bash scripts/main.sh` on a fresh clone, install included: the figure a new user meets first, for one or more
git refs (e.g. the commit before the install split and the one after), each cloned into a scratch folder and run
from scratch (a new .venv, vLLM, the model), one after the other.

    .venv/bin/python -m benchmarks.perf.fresh_clone --ref 91b28fd --ref HEAD [--limit 50]

Run it on an otherwise idle machine: the install is mostly downloads and unpacking, which a concurrent test suite
slows down. Records each ref's wall time, split as main.sh runs it (scripts/setup.sh, then the job with
NEMO_GYM_SKIP_SETUP=1), and the ratio of the last ref to the first. Writes benchmarks/results/fresh_clone.json.
"""

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.perf.lifecycle import run_child
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, load_average, recording
from nemo_gym.server.supervisor import free_port

def _clone(ref: str, dest: Path) -> str:
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", ref], check=True)
    return subprocess.run(["git", "-C", str(dest), "rev-parse", "--short", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _timed(args: list[str], cwd: Path, env: dict[str, str], what: str) -> float:
    started = time.monotonic()
    result = run_child(args, cwd=cwd, timeout_s=3600, merge_stderr=True, env=env)
    if result.returncode != 0:
        raise BenchmarkFailed(f"{what}: {' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}")
    return time.monotonic() - started


def _measure(ref: str, scratch: Path, limit: int) -> dict:
    """scripts/main.sh in two timed steps, as it runs them itself: its install (scripts/setup.sh), then the job."""
    clone = scratch / f"clone_{ref.replace('/', '_')}"
    commit = _clone(ref, clone)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("NEMO_GYM_", "VIRTUAL_ENV"))}
    install_s = _timed(["bash", "scripts/setup.sh"], clone, env, ref)
    job_s = _timed(["bash", "scripts/main.sh", f"+head_server.port={free_port()}", f"+log_dir={scratch}/logs",
                    f"+output_jsonl_fpath={scratch}/rollouts_{commit}.jsonl", f"+limit={limit}"],
                   clone, {**env, "NEMO_GYM_SKIP_SETUP": "1"}, ref)
    return {"ref": ref, "commit": commit, "wall_s": round(install_s + job_s, 1), "install_s": round(install_s, 1),
            "main_job_s": round(job_s, 1), "rollouts": limit, "load_average_at_end": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", action="append", required=True, help="a git ref to clone and run (repeatable)")
    parser.add_argument("--limit", type=int, default=50, help="rollouts of the example dataset (default: all 50)")
    args = parser.parse_args()
    with recording("fresh_clone") as recorder, tempfile.TemporaryDirectory(prefix="ng_fresh_") as tmp:
        runs = [_measure(ref, Path(tmp), args.limit) for ref in args.ref]
        ratios = {"last_vs_first_wall": round(runs[-1]["wall_s"] / runs[0]["wall_s"], 3)} if len(runs) > 1 else {}
        recorder.write(ratios, {"settings": {"command": "bash scripts/main.sh", "limit": args.limit},
                                "runs": runs})


if __name__ == "__main__":
    main()
