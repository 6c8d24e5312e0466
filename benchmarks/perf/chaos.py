"""Chaos benchmark: the real stack in front of simulated vLLM replicas of which one or two fail, and in front of a
hosted endpoint whose quota runs out mid-run.

    python -m benchmarks.perf.chaos [--quick]

Each row: ng_run (simple_agent + the weather environment + vllm_model, benchmarks/perf/harness.py) in front of
`REPLICAS` simulated replicas (benchmarks/fleet, multi-turn rows, `TIME_SCALE` simulated seconds per second), one or
two of them given a fault (benchmarks/fleet/fleet.py) from the start or once `FAULT_AT` of the rows are done, and
ng_collect_rollouts holding `IN_FLIGHT` rows in flight. Measured per row:
- exactly once: every row's key once in the output, none in both the output and the failures file;
- failed rollouts (the failures file) and rollouts still missing when the run ended;
- time to eject: from the fault (the collector's start, for a fault from the start) until the model server's router
  has taken every faulty replica out of service (its `GET /replicas`, polled every `POLL_S`); also in simulated
  seconds, what it would be with replicas at their real speed (the fleet, not our CPU, sets the pace here: the
  throughput grows with the time scale);
- throughput: rollouts/s from the fault (at least `WINDOW_FROM` of the rows) until `WINDOW_TO` of them are done, over
  the same for a fleet of the healthy replicas alone (`REPLICAS` - k), run in the same invocation.
A run that has not ended `DEADLINE_FACTOR` times its baseline's wall time after it started is stopped (SIGINT).
The quota row: one replica as a hosted endpoint that answers 429 `insufficient_quota` with `retry-after: 3600` once it
has served `QUOTA_AFTER` requests: the time from that first refusal until ng_collect_rollouts exits (stopped after
`QUOTA_CAP_S`), its exit status and the rollouts it saved.
Writes benchmarks/results/chaos.json.
"""

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from benchmarks.fleet.__main__ import DEFAULT_MODEL
from benchmarks.fleet.fleet import QUOTA_RETRY_AFTER_S, SLOW_FACTOR
from benchmarks.fleet.stack import FleetProcess, fleet_process, write_fleet_rows
from benchmarks.fleet.workload import MULTI_TURN
from benchmarks.perf.harness import WEATHER_AGENT, Stack, _env, weather_stack
from benchmarks.perf.lifecycle import child_process
from benchmarks.perf.results import BenchmarkFailed, load_average, recording
from nemo_gym.responses_api_models.stats_paths import REPLICAS_PATH
from nemo_gym.run_files.paths import RunPaths
from nemo_gym.run_files.rows import row_key

REPLICAS = 8
TIME_SCALE = 5.0
IN_FLIGHT = 48
ROWS, QUICK_ROWS = 1200, 400
FAULT_AT = 0.3
WINDOW_FROM, WINDOW_TO = 0.1, 0.9
BACK_AFTER = 0.2  # a killed replica starts again once it is out and this share of the rows more are done
POLL_S = 0.1
COLLECTOR_STOP_GRACE_S = 60.0
DEADLINE_FACTOR = 3.0
QUOTA_ROWS, QUOTA_AFTER = 400, 400
QUOTA_CAP_S = 180.0
MODEL_SERVER = "policy_model"
# What issue 42 asks of each row.
TARGETS = {"exactly_once": True, "failed_rollouts": 0, "throughput_vs_healthy_at_least": 0.85,
           "time_to_eject_s_at_most": 5.0, "quota_time_to_stop_s_at_most": 120.0}


@dataclass(frozen=True)
class Scenario:
    fault: str
    faulty: tuple[int, ...]
    mid_run: bool

    @property
    def name(self) -> str:
        return f"{self.fault}, {len(self.faulty)} of {REPLICAS}, {'mid-run' if self.mid_run else 'from the start'}"


SCENARIOS = (
    Scenario("http_5xx", (0,), mid_run=False),
    Scenario("http_5xx", (0, 1), mid_run=True),
    Scenario("hang", (0,), mid_run=True),
    Scenario("slow", (0,), mid_run=False),
    Scenario("invalid_json", (0, 1), mid_run=False),
    Scenario("reset", (0,), mid_run=True),
    Scenario("kill", (0,), mid_run=True),
)
QUICK_SCENARIOS = (SCENARIOS[0], SCENARIOS[2], SCENARIOS[6])


class LineCount:
    """The lines a growing file holds, reading only what was added since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.lines = path, 0, 0

    def __call__(self) -> int:
        try:
            with open(self.path, "rb") as file:
                file.seek(self.offset)
                added = file.read()
        except FileNotFoundError:
            return 0
        self.offset += len(added)
        self.lines += added.count(b"\n")
        return self.lines


def _keys(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [key for line in path.read_bytes().splitlines() if (key := row_key(line)) is not None]


def _server_url(stack: Stack, name: str) -> str:
    servers = httpx.get(f"{stack.head_url}/servers", timeout=10, trust_env=False).json()["servers"]
    return str(next(server["url"] for server in servers if server["name"] == name))


def _router(model_url: str) -> list[dict[str, Any]]:
    """The model server's per-replica stats (vllm_model's `GET /replicas`)."""
    reply = httpx.get(f"{model_url}{REPLICAS_PATH}", timeout=10, trust_env=False)
    reply.raise_for_status()
    return list(reply.json()["replicas"])


def _out_count(replica: dict[str, Any]) -> int:
    """How often the router has taken `replica` out of service (ejected, or down after a refused connection)."""
    return int(replica["ejections"]) + int(replica["downs"])


class Run:
    """One ng_collect_rollouts run against a stack, its progress sampled every POLL_S until it exits."""

    def __init__(self, stack: Stack, rows_path: Path, rows: int, output: Path) -> None:
        self.stack, self.rows_path, self.rows, self.output = stack, rows_path, rows, output
        self.samples: list[tuple[float, int]] = []  # (monotonic time, rollouts in the output)
        self.started = self.ended = 0.0
        self.exit_status: int | None = None
        self.stopped_by_benchmark = False

    def collect(self, on_poll: Callable[[float, int], bool]) -> None:
        """Until the collector exits; `on_poll(now, rollouts done)` after each sample: True stops the collector
        (SIGINT, as Ctrl-C does)."""
        log = self.output.with_suffix(".collector.log")
        command = [sys.executable, "-c", "from nemo_gym.cli.collect import main; main()",
                   f"+head_server_url={self.stack.head_url}", f"+agent_name={WEATHER_AGENT}",
                   f"+input_jsonl_fpath={self.rows_path}", f"+output_jsonl_fpath={self.output}",
                   f"+num_samples_in_parallel={IN_FLIGHT}", "+adaptive_concurrency=false", "+disable_aggregation=true"]
        lines = LineCount(self.output)
        with open(log, "wb") as sink, child_process(command, env=_env(), cwd=self.output.parent, stdout=sink,
                                                    stderr=subprocess.STDOUT) as popen:
            self.started = time.monotonic()
            while popen.poll() is None:
                now = time.monotonic()
                self.samples.append((now, lines()))
                if on_poll(now, self.samples[-1][1]):
                    self.stopped_by_benchmark = True
                    popen.send_signal(signal.SIGINT)
                try:
                    popen.wait(timeout=COLLECTOR_STOP_GRACE_S if self.stopped_by_benchmark else POLL_S)
                except subprocess.TimeoutExpired:
                    if self.stopped_by_benchmark:
                        break  # child_process stops it
            self.ended = time.monotonic()
        self.samples.append((self.ended, lines()))
        self.exit_status = popen.returncode

    def rate(self, from_share: float) -> float | None:
        """Rollouts/s from the first sample with `from_share` of the rows done to the first with WINDOW_TO."""
        start = next(((t, n) for t, n in self.samples if n >= from_share * self.rows), None)
        end = next(((t, n) for t, n in self.samples if n >= WINDOW_TO * self.rows), None)
        if start is None or end is None or end[0] <= start[0]:
            return None
        return (end[1] - start[1]) / (end[0] - start[0])

    def outcome(self) -> dict[str, Any]:
        """Exactly once, failed and missing rollouts, from the output and failures files."""
        done = _keys(self.output)
        failed = set(_keys(RunPaths(self.output).failures))
        unique = set(done)
        said = [line for line in self.output.with_suffix(".collector.log").read_text().splitlines() if line.strip()]
        return {"rows": self.rows, "exit_status": self.exit_status, "stopped_by_benchmark": self.stopped_by_benchmark,
                "wall_s": round(self.ended - self.started, 1), "rollouts": len(unique),
                "duplicates": len(done) - len(unique), "failed_rollouts": len(failed - unique),
                "in_output_and_failures": len(unique & failed), "missing": self.rows - len(unique | failed),
                "exactly_once": len(done) == len(unique) == self.rows and not unique & failed,
                "collector_last_line": said[-1][:300] if said else ""}


class FaultWatch:
    """For `Run.collect`: sets a scenario's fault (at the first poll, or once FAULT_AT of the rows are done), notes
    when the router took each faulty replica out, starts a killed one again, and stops the run at its deadline."""

    def __init__(self, scenario: Scenario, fleet: FleetProcess, model_url: str, rows: int, deadline_s: float) -> None:
        self.scenario, self.fleet, self.model_url, self.rows = scenario, fleet, model_url, rows
        self.deadline_s = deadline_s
        self.deadline = float("inf")
        self.fault_at: float | None = None
        self.out_at: dict[int, float] = {}
        self.back_at: float | None = None
        self._before: list[dict[str, Any]] = []  # the router's stats when the fault was set

    def __call__(self, now: float, done: int) -> bool:
        scenario = self.scenario
        self.deadline = min(self.deadline, now + self.deadline_s)
        if self.fault_at is None and (not scenario.mid_run or done >= FAULT_AT * self.rows):
            self._before = _router(self.model_url)
            if scenario.mid_run:  # else it was set before the stack started
                for index in scenario.faulty:
                    self.fleet.fault(index, scenario.fault)
            self.fault_at = time.monotonic() if scenario.mid_run else now
        if self.fault_at is not None and len(self.out_at) < len(scenario.faulty):
            self._note_ejections()
        if (scenario.fault == "kill" and self.back_at is None and len(self.out_at) == len(scenario.faulty)
                and done >= (FAULT_AT + BACK_AFTER) * self.rows):
            for index in scenario.faulty:
                self.fleet.fault(index, "none")
            self.back_at = time.monotonic()
        return now > self.deadline

    def _note_ejections(self) -> None:
        replicas = _router(self.model_url)
        now = time.monotonic()
        for index in self.scenario.faulty:
            replica, before = replicas[index], self._before[index]
            if index not in self.out_at and _out_count(replica) > _out_count(before):
                ejected = replica["ejections"] > before["ejections"]  # dated by the router; a down one by this poll
                self.out_at[index] = now - replica["last_ejected_s_ago"] if ejected else now

    def since_fault(self, at: float | None) -> float | None:
        return round(at - self.fault_at, 2) if at is not None and self.fault_at is not None else None


class QuotaWatch:
    """For `Run.collect`: notes the endpoint's first refusal, and stops the run QUOTA_CAP_S after it."""

    def __init__(self, fleet: FleetProcess, after: int) -> None:
        self.fleet, self.after = fleet, after
        self.refused_at: float | None = None

    def __call__(self, now: float, done: int) -> bool:
        if self.refused_at is None:
            replica = self.fleet.stats()[0]
            if replica["faulted"]:
                self.refused_at = float(replica["arrivals"][self.after])
        return self.refused_at is not None and now - self.refused_at > QUOTA_CAP_S


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return round(value, digits) if value is not None else None


def _urls(fleet: FleetProcess) -> str:
    return f"[{','.join(fleet.base_urls)}]"


def healthy_run(work: Path, replicas: int, rows_path: Path, rows: int) -> dict[str, Any]:
    """The baseline: a fleet of `replicas` healthy replicas."""
    folder = work / f"healthy_{replicas}"
    with fleet_process(folder / "fleet", replicas, TIME_SCALE, MULTI_TURN) as fleet, \
            weather_stack(folder / "stack", model_base_url=_urls(fleet), model_name=DEFAULT_MODEL) as stack:
        run = Run(stack, rows_path, rows, folder / "rollouts.jsonl")
        run.collect(lambda now, done: False)
    row = {"replicas": replicas, **run.outcome(), "rollouts_per_s": _rounded(run.rate(WINDOW_FROM)),
           "load_average": load_average()}
    print(f"healthy, {replicas} replicas: {row}", flush=True)
    if not row["exactly_once"]:
        raise BenchmarkFailed(f"the healthy fleet of {replicas} lost rollouts, a baseline would mean nothing: {row}")
    return row


def fault_run(work: Path, scenario: Scenario, rows_path: Path, rows: int, baseline: dict[str, Any]) -> dict[str, Any]:
    folder = work / f"{scenario.fault}_{len(scenario.faulty)}_{'mid' if scenario.mid_run else 'start'}"
    with fleet_process(folder / "fleet", REPLICAS, TIME_SCALE, MULTI_TURN) as fleet:
        if not scenario.mid_run:
            for index in scenario.faulty:
                fleet.fault(index, scenario.fault)
        with weather_stack(folder / "stack", model_base_url=_urls(fleet), model_name=DEFAULT_MODEL) as stack:
            model_url = _server_url(stack, MODEL_SERVER)
            run = Run(stack, rows_path, rows, folder / "rollouts.jsonl")
            watch = FaultWatch(scenario, fleet, model_url, rows, DEADLINE_FACTOR * baseline["wall_s"])
            run.collect(watch)
            router = _router(model_url)
        faulty = {index: fleet.stats()[index] for index in scenario.faulty}
    rate = run.rate(FAULT_AT if scenario.mid_run else WINDOW_FROM)
    out_at = watch.out_at
    eject_s = watch.since_fault(max(out_at.values())) if len(out_at) == len(faulty) else None
    row = {"scenario": scenario.name, "fault": scenario.fault, "faulty_replicas": len(scenario.faulty),
           "mid_run": scenario.mid_run, **run.outcome(),
           "time_to_eject_s": eject_s,
           "time_to_eject_simulated_s": _rounded(eject_s * TIME_SCALE, 1) if eject_s is not None else None,
           "eject_s_by_replica": {str(i): watch.since_fault(t) for i, t in out_at.items()},
           "back_after_s": watch.since_fault(watch.back_at),
           "healthy_replicas_taken_out": sum(_out_count(r) for i, r in enumerate(router) if i not in faulty),
           "faulted_requests": sum(r["faulted"] for r in faulty.values()),
           "requests_to_faulty_after_ejection": sum(1 for i, r in faulty.items() if i in out_at
                                                    for t in r["arrivals"] if t > out_at[i]),
           "rollouts_per_s": _rounded(rate), "healthy_rollouts_per_s": baseline["rollouts_per_s"],
           "throughput_vs_healthy": _rounded(rate / baseline["rollouts_per_s"], 3) if rate is not None else None,
           "router": router, "load_average": load_average()}
    print(f"{scenario.name}: {({k: v for k, v in row.items() if k != 'router'})}", flush=True)
    return row


def quota_run(work: Path, rows: int, after: int) -> dict[str, Any]:
    """One replica as a hosted endpoint whose quota is spent after `after` requests."""
    folder = work / "quota"
    rows_path = write_fleet_rows(folder / "rows.jsonl", rows, MULTI_TURN)
    with fleet_process(folder / "fleet", 1, TIME_SCALE, MULTI_TURN) as fleet:
        fleet.fault(0, "quota", after=after)
        with weather_stack(folder / "stack", model_base_url=fleet.base_urls[0], model_name=DEFAULT_MODEL) as stack:
            run = Run(stack, rows_path, rows, folder / "rollouts.jsonl")
            watch = QuotaWatch(fleet, after)
            run.collect(watch)
        replica = fleet.stats()[0]
    refused_at = watch.refused_at
    row = {"quota_requests": after, "retry_after_s": QUOTA_RETRY_AFTER_S, **run.outcome(),
           "time_to_stop_s": _rounded(run.ended - refused_at) if refused_at is not None else None,
           "requests_refused": replica["faulted"], "load_average": load_average()}
    print(f"quota spent after {after} requests: {row}", flush=True)
    return row


def _ratios(runs: list[dict[str, Any]], quota: dict[str, Any]) -> dict[str, Any]:
    ratios = [r["throughput_vs_healthy"] for r in runs if r["throughput_vs_healthy"] is not None]
    ejections = [r["time_to_eject_s"] for r in runs if r["time_to_eject_s"] is not None]
    return {"every_rollout_exactly_once": all(r["exactly_once"] for r in runs),
            "failed_rollouts": sum(r["failed_rollouts"] for r in runs),
            "missing_rollouts": sum(r["missing"] for r in runs),
            "min_throughput_vs_healthy": min(ratios) if ratios else None,
            "max_time_to_eject_s": max(ejections) if ejections else None,
            "not_ejected": [r["scenario"] for r in runs if r["time_to_eject_s"] is None],
            "quota_time_to_stop_s": quota["time_to_stop_s"], "quota_exit_status": quota["exit_status"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"{len(QUICK_SCENARIOS)} fault rows of {QUICK_ROWS} rollouts, a smaller quota row")
    args = parser.parse_args()
    scenarios = QUICK_SCENARIOS if args.quick else SCENARIOS
    rows = QUICK_ROWS if args.quick else ROWS
    quota_rows, quota_after = (QUOTA_ROWS // 2, QUOTA_AFTER // 2) if args.quick else (QUOTA_ROWS, QUOTA_AFTER)
    with recording("chaos", args.quick) as recorder, \
            tempfile.TemporaryDirectory(prefix="ngchaos_", dir="/tmp") as tmp:  # short: Ray's socket paths
        work = Path(tmp)
        rows_path = write_fleet_rows(work / "rows.jsonl", rows, MULTI_TURN)
        healthy = {n: healthy_run(work, n, rows_path, rows)
                   for n in sorted({REPLICAS - len(s.faulty) for s in scenarios}, reverse=True)}
        runs = [fault_run(work, s, rows_path, rows, healthy[REPLICAS - len(s.faulty)]) for s in scenarios]
        quota = quota_run(work, quota_rows, quota_after)
        recorder.write(_ratios(runs, quota), {
            "settings": {"replicas": REPLICAS, "time_scale": TIME_SCALE, "workload": MULTI_TURN.name,
                         "rows": rows, "in_flight": IN_FLIGHT, "fault_at": FAULT_AT,
                         "throughput_window": [WINDOW_FROM, WINDOW_TO], "slow_factor": SLOW_FACTOR,
                         "killed_back_after": BACK_AFTER, "deadline_factor": DEADLINE_FACTOR,
                         "quota_rows": quota_rows, "quota_cap_s": QUOTA_CAP_S, "quick": args.quick},
            "targets": TARGETS, "healthy": list(healthy.values()), "faults": runs, "quota": quota})


if __name__ == "__main__":
    main()
