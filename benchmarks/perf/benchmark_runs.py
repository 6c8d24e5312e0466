"""Real benchmark runs with the bundled SmolLM2-135M-Instruct on vLLM's CPU build, as a user runs them.

    .venv/bin/python -m benchmarks.perf.benchmark_runs [--temperature 0.7] [--vllm-url URL]

- humaneval: the first 20 problems x 2 repeats, scored in the code_exec sandbox;
- arithmetic: 50 rows per level x 4 repeats, scored by the math environment, reward per level.
Each is `ng_prepare_benchmark`, then `ng_e2e_collect_rollouts` with the benchmark's config and configs/vllm_model.yaml
pointed at the vLLM (which this script starts, or `--vllm-url`). Records rewards (per level for arithmetic, with
the outcomes of humaneval's programs), pass@k, collection time and the whole command's wall time.
Writes benchmarks/results/benchmark_runs.json.
"""

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.perf.lifecycle import run_child
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, load_average, recording
from benchmarks.perf.vllm_server import MODEL_NAME, vllm_server
from nemo_gym.jsonl_records import iter_records
from nemo_gym.run_files.metrics_file import read_metrics
from nemo_gym.run_files.paths import RunPaths
from nemo_gym.server.supervisor import free_port

RUNS = {  # benchmark -> (prepare options, collection options)
    "humaneval": ([], ["+limit=20", "+num_repeats=2"]),
    "arithmetic": (["+n=50"], ["+num_repeats=4"]),
}
_DONE = re.compile(r"done: (\d+) rollouts collected in ([\d.]+) s")


def _ng(command: str, args: list[str], timeout_s: float = 3600) -> str:
    result = run_child([sys.executable, "-c", f"from nemo_gym.cli.{command} import main; main()", *args],
                       cwd=REPO_ROOT, timeout_s=timeout_s)
    if result.returncode != 0:
        raise BenchmarkFailed(f"{command} {' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}"
                           f"\n{result.stderr[-3000:]}")
    return result.stdout


def run_benchmark(name: str, options: tuple[list[str], list[str]], base_url: str, work: Path,
                  temperature: float) -> dict[str, Any]:
    prepare_options, collect_options = options
    _ng("prepare_benchmark", [f"+benchmark={name}", *prepare_options])
    output = work / f"{name}.jsonl"
    args = [f"+config_paths=[benchmarks/{name}/config.yaml,configs/vllm_model.yaml]",
            f"+policy_base_url={base_url}", "+policy_api_key=EMPTY", f"+policy_model_name={MODEL_NAME}",
            "+split=benchmark", f"+output_jsonl_fpath={output}", f"+head_server.port={free_port()}",
            f"+log_dir={work / 'logs' / name}", f"+responses_create_params.temperature={temperature}",
            "+num_samples_in_parallel=32", *collect_options]
    started = time.perf_counter()
    stdout = _ng("e2e", args)
    wall = time.perf_counter() - started
    done = _DONE.search(stdout)
    if done is None:
        raise RuntimeError(f"no 'done:' line in the output of {name}:\n{stdout[-3000:]}")
    rows = [row for _, row in iter_records(output)]
    metrics = read_metrics(RunPaths(output).aggregate_metrics)[0]
    agent_metrics = metrics["agent_metrics"]
    figures: dict[str, Any] = {
        "rollouts": len(rows), "collection_s": float(done.group(2)), "command_wall_s": round(wall, 1),
        "mean_reward": round(sum(r["reward"] for r in rows) / len(rows), 4), "key_metrics": metrics["key_metrics"],
        "load_average": load_average(),
    }
    if name == "arithmetic":
        figures["reward_by_level"] = {key.split("/")[0]: round(value, 4) for key, value in agent_metrics.items()
                                      if key.startswith("level_") and key.endswith("/mean_reward")}
    if name == "humaneval":
        figures["outcomes"] = dict(Counter(r["outcome"] for r in rows))
        figures["sandboxed"] = all(r["sandboxed"] for r in rows)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--vllm-url", help="a vLLM already serving the bundled model (default: start one)")
    parser.add_argument("--quick", action="store_true", help="arithmetic only, 5 rows per level, 1 repeat")
    args = parser.parse_args()
    plan = {"arithmetic": (["+n=5"], ["+num_repeats=1"])} if args.quick else RUNS
    runs = {}
    with recording("benchmark_runs", args.quick) as recorder, \
            tempfile.TemporaryDirectory(prefix="ng_benchmark_runs_") as tmp, \
            vllm_server(Path(tmp), args.vllm_url) as base_url:
        for name, options in plan.items():
            runs[name] = run_benchmark(name, options, base_url, Path(tmp), args.temperature)
            print(f"{name}: {runs[name]}", flush=True)
        recorder.write({}, {"settings": {"temperature": args.temperature, "runs": plan}, "runs": runs})


if __name__ == "__main__":
    main()
