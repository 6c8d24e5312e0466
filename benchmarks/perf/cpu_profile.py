"""Where a rollout's CPU goes, by process and by library: the full stack (collector -> simple_agent -> vllm_model ->
instant stub chat model, weather environment) at each concurrency, with py-spy sampling every process of it, the
collector too, while the collector runs.

    .venv/bin/python -m benchmarks.perf.cpu_profile [--concurrency 64,256,1024] [--rows 10000] [--top 6]
    .venv/bin/python -m benchmarks.perf.cpu_profile --baseline REV    # and REV's stack, side by side ("then")
    .venv/bin/python -m benchmarks.perf.cpu_profile --colocate        # the servers in one process

Needs py-spy (`pip install 'nemo_gym[profile]'`) and leave to trace processes (root, or kernel.yama.ptrace_scope 0).
Per concurrency and process: CPU-ms per rollout (from the OS, as in the other benchmarks), then py-spy's samples
of it (idle threads are not sampled, so samples follow CPU time) split by the library whose code was running (the
innermost Python frame's package: a C extension's time counts for the Python code that called it) and its
functions with the most samples of their own. With `--baseline REV`, each concurrency runs twice, on a checkout of
commit REV (a temporary git worktree; these benchmark scripts, its nemo_gym) and on this one, one after the other:
the ratios then compare now with then, measured minutes apart on the same machine. Writes
benchmarks/results/cpu_profile.json (with `--colocate`, +colocate_servers=true: cpu_profile_colocated.json).
"""

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from benchmarks.perf.harness import WEATHER_AGENT, Stack, run_collector, weather_stack, write_rows
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, load_average, recording

RATE_HZ = 200
_PROCESS = re.compile(r"process (\d+):")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def library_of(path: str) -> str:
    """The package a source file belongs to: `aiohttp`, `asyncio`, `nemo_gym/server`, ... ("?" when unknown)."""
    parts = Path(path).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            rest = parts[parts.index(marker) + 1:]
            return rest[0].removesuffix(".py") if rest else "?"
    for top in ("nemo_gym", "benchmarks"):
        if top in parts:
            rest = parts[parts.index(top):]
            return "/".join(rest[:2]).removesuffix(".py")
    for index, part in enumerate(parts):
        if part.startswith("python3") and index + 1 < len(parts):
            return parts[index + 1].removesuffix(".py")  # the standard library
    return "?"


def parse_raw(text: str) -> dict[int | None, tuple[Counter, Counter]]:
    """py-spy's raw (collapsed) output: per process (None when the stacks name none), samples by library and by
    function of the innermost frame."""
    out: dict[int | None, tuple[Counter, Counter]] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        # With --subprocesses a stack starts with the chain of processes down to the sampled one.
        processes = [int(match.group(1)) for frame in frames if (match := _PROCESS.match(frame))]
        pid = processes[-1] if processes else None
        leaf = _FRAME.match(frames[-1]) if len(frames) > len(processes) else None
        libraries, functions = out.setdefault(pid, (Counter(), Counter()))
        if leaf is None:
            libraries["?"] += int(count)
            functions[frames[-1]] += int(count)
            continue
        library = library_of(leaf["file"])
        libraries[library] += int(count)
        functions[f"{leaf['function']} ({library})"] += int(count)
    return out


def _shares(counter: Counter, top: int | None = None) -> dict[str, float]:
    total = sum(counter.values()) or 1
    return {name: round(count / total, 3) for name, count in counter.most_common(top)}


def _py_spy() -> str:
    # pip puts it beside this interpreter, which need not be on PATH (.venv/bin/python -m ...)
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.is_file() else shutil.which("py-spy")
    if found is None:
        raise BenchmarkFailed("py-spy is not installed: pip install 'nemo_gym[profile]'")
    return found


def profile_round(stack: Stack, work: Path, inputs: Path, concurrency: int, top: int) -> dict[str, Any]:
    py_spy = _py_spy()
    servers_out, collector_out = work / f"servers_{concurrency}.txt", work / f"collector_{concurrency}.txt"
    names = stack.server_pids()
    record = [py_spy, "record", "--rate", str(RATE_HZ), "--format", "raw", "--nonblocking", "--full-filenames"]
    sampler = subprocess.Popen([*record, "--subprocesses", "--pid", str(stack.popen.pid), "--output", str(servers_out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        load = load_average()
        result = run_collector(stack, inputs, work / f"out_{concurrency}.jsonl", WEATHER_AGENT, concurrency,
                               wrapper=(*record, "--output", str(collector_out), "--"))
    finally:
        os.killpg(sampler.pid, signal.SIGINT)  # py-spy writes its output when interrupted
        _, err = sampler.communicate(timeout=120)
    if not servers_out.exists() or not collector_out.exists():
        raise BenchmarkFailed(f"py-spy wrote no profile (can it trace processes here?): {err.decode()[-1000:]}")
    by_server: dict[str, tuple[Counter, Counter]] = {}
    for pid, (libraries, functions) in parse_raw(servers_out.read_text(errors="replace")).items():
        name = names.get(pid, "ng_run") if pid is not None else "ng_run"
        into = by_server.setdefault(name, (Counter(), Counter()))
        into[0].update(libraries)
        into[1].update(functions)
    collector = parse_raw(collector_out.read_text(errors="replace"))
    by_server["collector"] = next(iter(collector.values()), (Counter(), Counter()))
    processes = {}
    for name, cpu_ms in result["cpu_ms_per_rollout_by_process"].items():
        libraries, functions = by_server.get(name, (Counter(), Counter()))
        processes[name] = {"cpu_ms_per_rollout": cpu_ms, "samples": sum(libraries.values()),
                           "by_library": _shares(libraries, top), "top_functions": _shares(functions, top)}
    print(f"{concurrency} in flight: {result['rollouts_per_s']:.0f}/s, "
          f"{result['cpu_ms_per_rollout']:.2f} cpu-ms/rollout "
          f"(" + ", ".join(f"{name} {p['cpu_ms_per_rollout']:.2f}" for name, p in processes.items()) + ")", flush=True)
    return {"concurrency": concurrency, "rollouts_per_s": result["rollouts_per_s"],
            "cpu_ms_per_rollout": result["cpu_ms_per_rollout"], "load_average_at_start": load,
            "processes": processes}


@contextlib.contextmanager
def checkout_first(revision: str | None, work: Path) -> Iterator[str | None]:
    """With `revision`: a temporary worktree of it, put first on PYTHONPATH while the block runs (the harness passes
    PYTHONPATH on to every process it starts), and its short commit; without one, nothing changes (None)."""
    if revision is None:
        yield None
        return
    tree = work / "baseline"
    subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "--force", str(tree), revision],
                   check=True, capture_output=True)
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree)
    try:
        yield subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], check=True,
                             capture_output=True, text=True).stdout.strip()
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(tree)], check=False,
                       capture_output=True)


def profile_rounds(work: Path, inputs: Path, concurrencies: list[int], top: int,
                   colocate: bool = False) -> list[dict[str, Any]]:
    work.mkdir()
    with weather_stack(work / "stack", colocate=colocate) as stack:
        run_collector(stack, write_rows(work / "warmup.jsonl", 500), work / "warmup.jsonl.out", WEATHER_AGENT, 64)
        return [profile_round(stack, work, inputs, concurrency, top) for concurrency in concurrencies]


def _per_process(rounds: list[dict[str, Any]], over: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """CPU-ms per rollout of each process (and all together) in each of `rounds`, over the same in `over`."""
    out = {}
    for row, base in zip(rounds, over):
        ratios = {"all": round(row["cpu_ms_per_rollout"] / base["cpu_ms_per_rollout"], 3)}
        ratios.update({name: round(process["cpu_ms_per_rollout"] / base["processes"][name]["cpu_ms_per_rollout"], 3)
                       for name, process in row["processes"].items()
                       if base["processes"].get(name, {}).get("cpu_ms_per_rollout")})
        out[str(row["concurrency"])] = ratios
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="64,256,1024")
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--top", type=int, default=6, help="libraries and functions kept per process")
    parser.add_argument("--quick", action="store_true", help="2,000 rows at 64 and 1024, results under quick/")
    parser.add_argument("--baseline", metavar="REV", help="also profile commit REV's stack, side by side")
    parser.add_argument("--colocate", action="store_true", help="the stack's servers in one process")
    args = parser.parse_args()
    if args.colocate and args.baseline:
        parser.error("--colocate profiles this checkout only: a baseline before colocate_servers has no such layout")
    concurrencies = [64, 1024] if args.quick else [int(c) for c in args.concurrency.split(",")]
    rows = 2000 if args.quick else args.rows
    name = "cpu_profile_colocated" if args.colocate else "cpu_profile"
    with recording(name, args.quick, module="benchmarks.perf.cpu_profile") as recorder, tempfile.TemporaryDirectory(prefix="ng_profile_") as tmp:
        work = Path(tmp)
        inputs = write_rows(work / "weather.jsonl", rows)
        baseline: dict[str, Any] = {}
        with checkout_first(args.baseline, work) as commit:
            if commit is not None:
                print(f"baseline: {commit}", flush=True)
                baseline = {"commit": commit,
                            "rounds": profile_rounds(work / "then", inputs, concurrencies, args.top)}
        rounds = profile_rounds(work / "now", inputs, concurrencies, args.top, args.colocate)
        first, last = rounds[0], rounds[-1]
        ratios: dict[str, Any] = {f"cpu_ms_per_rollout_{last['concurrency']}_vs_{first['concurrency']}": {
            name: round(process["cpu_ms_per_rollout"] / first["processes"][name]["cpu_ms_per_rollout"], 3)
            for name, process in last["processes"].items()
            if first["processes"].get(name, {}).get("cpu_ms_per_rollout")}}
        if baseline:
            ratios[f"cpu_ms_per_rollout_vs_{baseline['commit']}"] = _per_process(rounds, baseline["rounds"])
        recorder.write(ratios, {"settings": {"rows": rows, "concurrency": concurrencies, "rate_hz": RATE_HZ,
                                             "colocate_servers": args.colocate,
                                             "stack": "collector -> simple_agent -> vllm_model -> instant stub, "
                                                      "weather"},
                                "rounds": rounds, **({"baseline": baseline} if baseline else {})})


if __name__ == "__main__":
    main()
