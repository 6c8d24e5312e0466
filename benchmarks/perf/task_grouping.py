"""Task grouping benchmark: time and peak memory of turning an input file into keyed rollouts, ours vs NeMo Gym.

    .venv/bin/python -m benchmarks.perf.task_grouping [--sizes 100000 400000] [--reference-max 100000]

Ours is the validation pass of ng_collect_rollouts (`materialize_inputs`: parse, validate, group identical lines
into tasks, write the materialized file); the baseline is NeMo Gym 0.4.0's `_preprocess_rows_from_config` plus the
writing of its materialized file, run by its own interpreter (.venv-nemo-gym) on the same file. Each run is a fresh
process; peak memory is its VmHWM. Rows are ~250 bytes, the last tenth repeating earlier lines, 2 repeats.
Results go to benchmarks/results/task_grouping.json.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS = REPO_ROOT / "benchmarks" / "results" / "task_grouping.json"
REFERENCE_PYTHON = REPO_ROOT / ".venv-nemo-gym" / "bin" / "python"
_PEAK = 'int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024'

OURS = f"""
import sys, time
from pathlib import Path
from nemo_gym.rollout_collection.config import RolloutCollectionConfig
from nemo_gym.rollout_collection.inputs import materialize_inputs
config = RolloutCollectionConfig.from_mapping({{"input_jsonl_fpath": sys.argv[1], "output_jsonl_fpath": sys.argv[2],
                                                "agent_name": "a", "num_repeats": 2}})
started = time.perf_counter()
with open(config.materialized_jsonl_fpath, "wb", buffering=1 << 20) as out:
    plan = materialize_inputs(config, Path(sys.argv[1]), "a", {{"a"}}, None, out)
print(time.perf_counter() - started, plan.tasks, {_PEAK})
"""
REFERENCE = f"""
import sys, time, orjson
from nemo_gym.rollout_collection import RolloutCollectionConfig, RolloutCollectionHelper
config = RolloutCollectionConfig(input_jsonl_fpath=sys.argv[1], output_jsonl_fpath=sys.argv[2],
                                 agent_name="a", num_repeats=2)
started = time.perf_counter()
rows = RolloutCollectionHelper()._preprocess_rows_from_config(config)
with config.materialized_jsonl_fpath.open("wb") as out:
    for row in rows:
        out.write(orjson.dumps(row) + b"\\n")
print(time.perf_counter() - started, len({{r["_ng_task_index"] for r in rows}}), {_PEAK})
"""


def write_input(path: Path, rows: int) -> int:
    distinct = rows - rows // 10
    pad = "x" * 200
    with open(path, "wb", buffering=1 << 20) as out:
        for i in range(rows):
            out.write(orjson.dumps({"responses_create_params": {"input": f"question {i % distinct} {pad}"},
                                    "expected_answer": str(i % distinct)}) + b"\n")
    return distinct


def _run(argv: list[str], source: Path, workdir: Path) -> dict[str, float]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO_ROOT)} if argv[0] == sys.executable else {
        "PATH": os.environ.get("PATH", "")}
    done = subprocess.run([*argv, str(source), str(workdir / "out.jsonl")], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    seconds, tasks, peak = done.stdout.strip().splitlines()[-1].split()
    return {"seconds": round(float(seconds), 2), "tasks": int(tasks), "peak_rss_mb": round(float(peak), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 400_000])
    parser.add_argument("--reference-max", type=int, default=100_000, help="largest size NeMo Gym is run at")
    args = parser.parse_args()
    results = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="ng_bench_grouping_") as tmp:
            source = Path(tmp) / "in.jsonl"
            distinct = write_input(source, size)
            entry = {"rows": size, "input_mb": round(source.stat().st_size / 1e6, 1),
                     "ours": _run([sys.executable, "-c", OURS], source, Path(tmp))}
            assert entry["ours"]["tasks"] == distinct
            if size <= args.reference_max:
                entry["nemo_gym"] = _run([str(REFERENCE_PYTHON), "-I", "-c", REFERENCE], source, Path(tmp))
                assert entry["nemo_gym"]["tasks"] == distinct
                theirs, ours = entry["nemo_gym"], entry["ours"]
                entry["time_ratio_nemo_gym_over_ours"] = round(theirs["seconds"] / ours["seconds"], 2)
                entry["memory_ratio_nemo_gym_over_ours"] = round(theirs["peak_rss_mb"] / ours["peak_rss_mb"], 2)
            results.append(entry)
            print(json.dumps(entry), flush=True)
    record = {"benchmark": "task_grouping", "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                        "load_average_1m": round(os.getloadavg()[0], 1)},
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results}
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
