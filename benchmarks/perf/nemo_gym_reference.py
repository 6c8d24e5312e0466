"""NeMo Gym 0.4.0 (the reference, installed in .venv-nemo-gym) against nemo_gym on the same work, side by side.

    .venv/bin/python -m benchmarks.perf.nemo_gym_reference [--quick]

Both stacks serve the same example weather environment (`example_single_tool_call` + `simple_agent` + `vllm_model`)
in front of one instant stub Chat Completions model (benchmarks/perf/stub_chat.py, started by our ng_run), and each
side's own `ng_collect_rollouts` runs the same rows at the same concurrency: 2,000 rows at 64 concurrent and
10,000 rows at 256. NeMo Gym's stack is up only while its runs are made, before ours: its Ray works while idle,
which would slow ours on a small machine. Rate = rows / wall time of the whole collection command, measured the same
way on both sides (NeMo Gym also post-processes after its last rollout; that is part of its command); peak RSS =
the collector process's VmHWM. Ours runs twice per case, one process per server (`ours`) and the servers in one
process (`ours_colocated`, `+colocate_servers=true`, a second stack). Ratios: ours / NeMo Gym, each. NeMo Gym's ng_run gets a free head port (never 11000) and a
Ray of its own (private RAY_TMPDIR, no RAY_ADDRESS), and everything it started is stopped (benchmarks.perf.lifecycle).
Writes benchmarks/results/nemo_gym_reference.json.
"""

import argparse
import os
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import orjson

from benchmarks.perf.harness import WEATHER_AGENT, Stack, run_collector, weather_row, weather_stack
from benchmarks.perf.lifecycle import child_process, run_child
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, load_average, recording
from nemo_gym.server.supervisor import free_port

NG_VENV = REPO_ROOT / ".venv-nemo-gym"
NG_PYTHON = NG_VENV / "bin" / "python"
READY_LINE = b"servers ready!"
SERVER_DIRS = ("resources_servers/example_single_tool_call", "responses_api_agents/simple_agent",
               "responses_api_models/vllm_model")
# Runs NeMo Gym's ng_collect_rollouts in-process and reports that process's peak RSS as it exits.
COLLECT = ("import atexit, sys\n"
           "atexit.register(lambda: print('PEAK_RSS_KB', open('/proc/self/status').read()"
           ".split('VmHWM:')[1].split()[0], file=sys.stderr, flush=True))\n"
           "sys.argv[0] = 'ng_collect_rollouts'\n"
           "from nemo_gym.cli.legacy import main\n"
           "main()\n")


def write_rows(path: Path, n: int, **row_options: Any) -> Path:
    """The weather rows of the other benchmarks (`row_options`: weather_row's), with the `strict` flag NeMo Gym's
    request model requires on tools."""
    with open(path, "wb") as out:
        for i in range(n):
            row = weather_row(i, **row_options)
            for tool in row["responses_create_params"]["tools"]:
                tool["strict"] = True
                tool["parameters"]["additionalProperties"] = False
            out.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
    return path


def _reference_env(work: Path) -> dict[str, str]:
    """Our PYTHONPATH would make `nemo_gym` ours inside NeMo Gym's processes; a RAY_ADDRESS would join another Ray."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "VIRTUAL_ENV")}
    ray_tmp = work / "ray"
    ray_tmp.mkdir(exist_ok=True)
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps Ray's node on loopback, not the machine's outward address.
    return {**env, "RAY_TMPDIR": str(ray_tmp), "PATH": f"{NG_VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def _site_packages() -> Path:
    if not NG_PYTHON.exists():
        raise BenchmarkFailed(f"{NG_PYTHON} is missing: bash scripts/setup.sh installs NeMo Gym 0.4.0 there")
    out = subprocess.run([str(NG_PYTHON), "-I", "-c", "import nemo_gym, pathlib, importlib.metadata as m; "
                          "print(m.version('nemo-gym')); print(pathlib.Path(nemo_gym.__file__).parents[1])"],
                         capture_output=True, text=True, check=True, cwd="/")
    version, site = out.stdout.split()
    if version != "0.4.0":
        raise BenchmarkFailed(f"{NG_VENV} holds nemo-gym {version}, not 0.4.0")
    return Path(site)


@contextmanager
def reference_stack(work: Path, model_base_url: str, timeout_s: float = 600) -> Iterator[int]:
    """NeMo Gym's ng_run with the weather environment in front of `model_base_url`; yields its head port."""
    site = _site_packages()
    venvs = work / "venvs"  # ng_run wants a venv per server folder: each one is the reference venv itself
    for server_dir in SERVER_DIRS:
        (venvs / server_dir).mkdir(parents=True, exist_ok=True)
        (venvs / server_dir / ".venv").symlink_to(NG_VENV)
    head_port = free_port()
    configs = [site / "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml",
               site / "responses_api_models/vllm_model/configs/vllm_model.yaml"]
    args = [str(NG_VENV / "bin" / "ng_run"), f"+config_paths=[{','.join(map(str, configs))}]",
            "+skip_venv_if_present=true", f"+uv_venv_dir={venvs}", "+head_server.host=127.0.0.1",
            f"+head_server.port={head_port}",
            f"+policy_base_url={model_base_url}", "+policy_api_key=none", "+policy_model_name=stub"]
    log_path = work / "reference_ng_run.log"
    with open(log_path, "wb") as log, child_process(args, env=_reference_env(work), cwd=work, stdout=log,
                                                    stderr=subprocess.STDOUT, grace_s=60) as popen:
        deadline = time.monotonic() + timeout_s
        while READY_LINE not in log_path.read_bytes():
            if popen.poll() is not None or time.monotonic() > deadline:
                raise BenchmarkFailed(f"NeMo Gym's ng_run did not come up:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield head_port


def reference_collect(work: Path, head_port: int, inputs: Path, output: Path, concurrency: int) -> dict[str, Any]:
    args = [str(NG_PYTHON), "-I", "-c", COLLECT, "+head_server.host=127.0.0.1", f"+head_server.port={head_port}",
            f"+input_jsonl_fpath={inputs}", f"+output_jsonl_fpath={output}", f"+agent_name={WEATHER_AGENT}",
            f"+num_samples_in_parallel={concurrency}"]
    started = time.monotonic()
    result = run_child(args, env=_reference_env(work), cwd=work, timeout_s=1800)
    wall = time.monotonic() - started
    rows = sum(1 for _ in inputs.open("rb"))
    written = sum(1 for _ in output.open("rb")) if output.exists() else 0
    peak = [line.split()[1] for line in result.stderr.splitlines() if line.startswith("PEAK_RSS_KB")]
    if result.returncode != 0 or written != rows or not peak:
        raise BenchmarkFailed(f"NeMo Gym's collector wrote {written} of {rows} rollouts (exit {result.returncode}):"
                              f"\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return {"rollouts": written, "wall_s": round(wall, 2), "rollouts_per_s": round(rows / wall, 1),
            "peak_rss_mb": round(int(peak[-1]) / 1024, 1), "load_average": load_average()}


def ours_collect(stack: Stack, inputs: Path, output: Path, concurrency: int) -> dict[str, Any]:
    rows = sum(1 for _ in inputs.open("rb"))
    result = run_collector(stack, inputs, output, WEATHER_AGENT, concurrency, "+disable_aggregation=false")
    return {"rollouts": result["succeeded"], "wall_s": result["wall_s"],
            "rollouts_per_s": round(rows / result["wall_s"], 1),
            "collection_rollouts_per_s": result["rollouts_per_s"], "peak_rss_mb": result["peak_rss_mb"],
            "load_average": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=["2000:64", "10000:256"], help="ROWS:CONCURRENCY ...")
    parser.add_argument("--quick", action="store_true", help="500 rows at 64 concurrent only")
    args = parser.parse_args()
    cases = [(500, 64)] if args.quick else [tuple(map(int, case.split(":"))) for case in args.cases]
    with recording("nemo_gym_reference", args.quick) as recorder, \
            tempfile.TemporaryDirectory(prefix="ngref_", dir="/tmp") as tmp:  # short: Ray's socket paths
        work = Path(tmp)
        inputs = {case: write_rows(work / f"rows_{case[0]}.jsonl", case[0]) for case in cases}
        theirs: dict[tuple[int, int], dict[str, Any]] = {}
        ours: dict[tuple[int, int], dict[str, Any]] = {}
        colocated: dict[tuple[int, int], dict[str, Any]] = {}
        # The apart stack serves the stub to both sides. Each other stack is up only for its own runs: NeMo Gym's
        # Ray keeps working while idle, and on two cores that would fall on ours.
        with weather_stack(work / "ours") as stack:
            assert stack.model_base_url is not None  # weather_stack's own stub
            with reference_stack(work / "ref", stack.model_base_url) as port:
                for rows, concurrency in cases:
                    theirs[rows, concurrency] = reference_collect(work / "ref", port, inputs[rows, concurrency],
                                                                  work / f"ref_{rows}.jsonl", concurrency)
                    print(f"NeMo Gym 0.4.0, {rows} rows, {concurrency} concurrent: {theirs[rows, concurrency]}",
                          flush=True)
            for rows, concurrency in cases:
                ours[rows, concurrency] = ours_collect(stack, inputs[rows, concurrency], work / f"ours_{rows}.jsonl",
                                                       concurrency)
                print(f"ours, {rows} rows, {concurrency} concurrent: {ours[rows, concurrency]}", flush=True)
            with weather_stack(work / "colocated", colocate=True) as colocated_stack:
                for rows, concurrency in cases:
                    colocated[rows, concurrency] = ours_collect(colocated_stack, inputs[rows, concurrency],
                                                                work / f"colocated_{rows}.jsonl", concurrency)
                    print(f"ours colocated, {rows} rows, {concurrency} concurrent: {colocated[rows, concurrency]}",
                          flush=True)
        runs: list[dict[str, Any]] = [
            {"rows": rows, "concurrency": concurrency, "ours": ours[rows, concurrency],
             "ours_colocated": colocated[rows, concurrency], "nemo_gym_0_4_0": theirs[rows, concurrency]}
            for rows, concurrency in cases]
        ratios = {f"{run['rows']}_rows_{run['concurrency']}_concurrent": {
            "rollouts_per_s_ours_vs_nemo_gym": round(run["ours"]["rollouts_per_s"]
                                                     / run["nemo_gym_0_4_0"]["rollouts_per_s"], 2),
            "rollouts_per_s_ours_colocated_vs_nemo_gym": round(run["ours_colocated"]["rollouts_per_s"]
                                                               / run["nemo_gym_0_4_0"]["rollouts_per_s"], 2),
            "collector_peak_rss_nemo_gym_vs_ours": round(run["nemo_gym_0_4_0"]["peak_rss_mb"]
                                                         / run["ours"]["peak_rss_mb"], 2)} for run in runs}
        recorder.write(ratios, {"settings": {"cases": cases, "environment": "example_single_tool_call",
                                             "model": "instant stub (benchmarks/perf/stub_chat.py)"},
                                "runs": runs})


if __name__ == "__main__":
    main()
