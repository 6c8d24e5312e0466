"""The multiple_choice, instruction_following and judge benchmarks with the bundled SmolLM2-135M-Instruct on vLLM's
CPU build, as a user runs them; the same vLLM is the policy and, through the judge's own model server, the judge.

    .venv/bin/python -m benchmarks.perf.environment_runs [--temperature 0.7] [--vllm-url URL] [--quick]

Each is `ng_prepare_benchmark`, then `ng_e2e_collect_rollouts` with the benchmark's config and configs/vllm_model.yaml
(the judge benchmark also gets +judge_base_url: the same vLLM). Records the scored rollouts and the failed ones by
class (judge_error only: anything else fails the benchmark), the mean reward with its 95% bootstrap interval, each
environment's own metrics (choice rate and accuracy per option position; instruction-level accuracy and follow rate
per kind; how often the judge's two orders agreed), collection time and the whole command's wall time.
Writes benchmarks/results/environment_runs.json.
"""

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.perf.lifecycle import run_child
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, load_average, recording
from benchmarks.perf.vllm_server import MODEL_NAME, vllm_server
from nemo_gym.failures import FailureClass
from nemo_gym.jsonl_records import iter_records
from nemo_gym.run_files.metrics_file import read_metrics
from nemo_gym.run_files.paths import RunPaths
from nemo_gym.server.supervisor import free_port

RUNS = {  # benchmark -> (prepare options, collection options)
    "multiple_choice": (["+n=100"], ["+num_repeats=2"]),
    "instruction_following": (["+n=40"], ["+num_repeats=2"]),
    "judge": (["+n=60"], ["+num_repeats=2"]),
}
QUICK = {name: (["+n=4"], ["+num_repeats=1"]) for name in RUNS}
OWN_METRICS = re.compile(r"^(chosen_|expected_answer_|instruction_level_accuracy|mean/followed:|mean/judge_)")
_DONE = re.compile(r"done: (\d+) rollouts collected in ([\d.]+) s")


def _command(command: str, args: list[str]) -> list[str]:
    return [sys.executable, "-c", f"from nemo_gym.cli.{command} import main; main()", *args]


def run_environment(name: str, options: tuple[list[str], list[str]], base_url: str, work: Path,
                    temperature: float) -> dict[str, Any]:
    prepare_options, collect_options = options
    prepared = run_child(_command("prepare_benchmark", [f"+benchmark={name}", *prepare_options]), cwd=REPO_ROOT,
                         timeout_s=600)
    if prepared.returncode != 0:
        raise BenchmarkFailed(f"ng_prepare_benchmark +benchmark={name} exited {prepared.returncode}: {prepared.stderr}")
    output = work / f"{name}.jsonl"
    model = [f"+{role}_{key}={value}" for role in ("policy", "judge")
             for key, value in (("base_url", base_url), ("api_key", "EMPTY"), ("model_name", MODEL_NAME))]
    args = [f"+config_paths=[benchmarks/{name}/config.yaml,configs/vllm_model.yaml]", *model, "+split=benchmark",
            f"+output_jsonl_fpath={output}", f"+head_server.port={free_port()}", f"+log_dir={work / 'logs' / name}",
            f"+responses_create_params.temperature={temperature}", "+num_samples_in_parallel=32", *collect_options]
    started = time.perf_counter()
    result = run_child(_command("e2e", args), cwd=REPO_ROOT, timeout_s=3600)
    wall = time.perf_counter() - started
    failed: dict[str, int] = {}
    for _, record in iter_records(RunPaths(output).failures) if RunPaths(output).failures.exists() else []:
        failed[record["failure_class"]] = failed.get(record["failure_class"], 0) + 1
    done = _DONE.search(result.stdout)
    if result.returncode not in (0, 1) or set(failed) - {FailureClass.JUDGE_ERROR} or done is None:
        raise BenchmarkFailed(f"{name}: ng_e2e_collect_rollouts exited {result.returncode} (failures {failed}):\n"
                              f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    rows = [row for _, row in iter_records(output)] if output.exists() else []
    if not rows:
        raise BenchmarkFailed(f"{name}: no rollout was scored (failures {failed})")
    entry = read_metrics(RunPaths(output).aggregate_metrics)[0]
    key = entry["key_metrics"]
    return {
        "rollouts": len(rows), "failed": failed, "mean_reward": round(sum(r["reward"] for r in rows) / len(rows), 4),
        "ci95": [round(key["ci95_low/reward"], 4), round(key["ci95_high/reward"], 4)],
        "own_metrics": {name: round(value, 4) for name, value in {**entry["agent_metrics"], **key}.items()
                        if OWN_METRICS.match(name) and not name.endswith("/num_rollouts")},
        "collection_s": float(done.group(2)), "command_wall_s": round(wall, 1), "load_average": load_average(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--vllm-url", help="a vLLM already serving the bundled model (default: start one)")
    parser.add_argument("--quick", action="store_true", help="4 rows of each, 1 repeat")
    args = parser.parse_args()
    plan = QUICK if args.quick else RUNS
    runs = {}
    with recording("environment_runs", args.quick) as recorder, \
            tempfile.TemporaryDirectory(prefix="ng_environment_runs_") as tmp, \
            vllm_server(Path(tmp), args.vllm_url) as base_url:
        for name, options in plan.items():
            runs[name] = run_environment(name, options, base_url, Path(tmp), args.temperature)
            print(f"{name}: {runs[name]}", flush=True)
        recorder.write({}, {"settings": {"temperature": args.temperature, "runs": plan}, "runs": runs})


if __name__ == "__main__":
    main()
