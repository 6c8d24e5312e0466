"""The one results writer: every benchmark writes `benchmarks/results/<name>.json` through `recording(...)`.

A results file holds the benchmark's name and status, the command that made it, the machine (CPU model and flags,
cores, memory, load average at the start and at the end, package versions, the commit measured), the ratios against the baseline
measured in the same run (first, because on a shared machine a ratio says more than a rate), then the raw numbers.
A run whose rollouts failed is written with `status: failed` and no figures: it is a failure, not a rate.
"""

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import psutil

from benchmarks.perf.lifecycle import exit_on_signals

REPO_ROOT = Path(__file__).resolve().parents[2]
# Tests point this elsewhere so that a benchmark they start never replaces a committed results file.
RESULTS_DIR = Path(os.environ.get("NEMO_GYM_BENCH_RESULTS_DIR", REPO_ROOT / "benchmarks" / "results"))
QUICK_DIR = RESULTS_DIR / "quick"  # smoke runs never replace the figures the docs quote
_PACKAGES = ("vllm", "torch", "transformers", "httptools", "aiohttp", "uvicorn", "orjson")


class BenchmarkFailed(RuntimeError):
    """The benchmark ran but its result is not a valid measurement (failed rollouts, a wrong answer count...)."""


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def loaded_at_start(machine: dict[str, Any]) -> bool:
    """Whether the one-minute load average at the start was above the core count: other work then had the cores,
    and the run's rates say more about that work than about what was measured (rerun it)."""
    cores = machine.get("cores")
    return bool(cores) and float(machine["load_average_at_start"].split()[0]) > cores


def wait_for_idle_cores(timeout_s: float = float(os.environ.get("NEMO_GYM_BENCH_IDLE_WAIT_S", 300))) -> None:
    """Wait (up to `timeout_s`) until the one-minute load average is at most the core count. A benchmark run just
    after another starts under the load that one left, which takes a minute or so to decay."""
    cores, deadline, said = os.cpu_count() or 1, time.monotonic() + timeout_s, False
    while os.getloadavg()[0] > cores and time.monotonic() < deadline:
        if not said:
            print(f"load average {load_average()} is above the {cores} cores: waiting up to {timeout_s:.0f} s for "
                  f"it to fall", file=sys.stderr, flush=True)
            said = True
        time.sleep(5)


def _version(package: str) -> str | None:
    for name in (package, f"{package}-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _commit() -> str | None:
    if given := os.environ.get("NEMO_GYM_BENCH_COMMIT"):  # a copy of the tree without .git (another machine)
        return given
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return f"{out.stdout.strip()}{'+dirty' if dirty else ''}" if out.returncode == 0 else None


def machine_info() -> dict[str, Any]:
    """Where a figure was measured: figures differ a lot between machines and with other load."""
    model, flags = platform.processor(), set()
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "cpu_flags": {flag: flag in flags for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")},
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_at_start": load_average(),
        "python": platform.python_version(),
        "versions": {package: _version(package) for package in _PACKAGES},
        "commit": _commit(),
    }


def best_by_concurrency(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The fastest run of each concurrency, in the order they ran."""
    best: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row["concurrency"] not in best or row["rollouts_per_s"] > best[row["concurrency"]]["rollouts_per_s"]:
            best[row["concurrency"]] = row
    return best


def results_path(name: str, quick: bool = False) -> Path:
    return (QUICK_DIR if quick else RESULTS_DIR) / f"{name}.json"


class Recorder:
    """Started when the benchmark starts (the machine and its load are taken then); writes the file at the end."""

    def __init__(self, name: str, output: Path, wait_for_idle: bool = True, module: str | None = None) -> None:
        self.name, self.output = name, output
        if wait_for_idle:
            wait_for_idle_cores()
        self.machine = machine_info()
        self.command = " ".join(["python", "-m", module or f"benchmarks.perf.{name}", *sys.argv[1:]])
        self._started = time.monotonic()
        if loaded_at_start(self.machine):
            print(f"warning: load average {self.machine['load_average_at_start']} is above the "
                  f"{self.machine['cores']} cores: the results file and the docs will say this run was loaded",
                  file=sys.stderr, flush=True)

    def write(self, ratios: dict[str, Any], figures: dict[str, Any], status: str = "ok") -> Path:
        machine = {**self.machine, "load_average_at_end": load_average()}
        report = {"benchmark": self.name, "status": status, "command": self.command, "machine": machine,
                  "wall_s": round(time.monotonic() - self._started, 1), "ratios": ratios, **figures}
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.output.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {self.output}", flush=True)
        return self.output


@contextmanager
def recording(name: str, quick: bool = False, output: Path | None = None,
              module: str | None = None) -> Iterator[Recorder]:
    """Run a benchmark's body (module `module`, default benchmarks.perf.<name>, writing results file `name`): signals stop it cleanly (every `finally` runs); a BenchmarkFailed (exit 1) or any
    other exception is written as a failed result, never as figures."""
    exit_on_signals()
    # Figures the docs quote wait for idle cores; smoke runs and tests' own outputs do not.
    recorder = Recorder(name, output or results_path(name, quick), wait_for_idle=output is None and not quick,
                        module=module)
    try:
        yield recorder
    except BenchmarkFailed as failure:
        recorder.write({}, {"error": str(failure)}, status="failed")
        print(f"FAILED: {failure}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except Exception as error:  # a crash is a failed run too; the traceback follows on stderr
        recorder.write({}, {"error": f"{type(error).__name__}: {error}"}, status="failed")
        raise
