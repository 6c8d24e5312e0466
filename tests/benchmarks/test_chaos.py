"""The chaos benchmark's pieces (benchmarks/perf/chaos.py): what it counts from a run's files, its throughput window,
when it sets a fault, notes an ejection, brings a killed replica back and stops a run; and one row through the real
stack, in seconds."""

import time
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from benchmarks.fleet.stack import FleetProcess, write_fleet_rows
from benchmarks.fleet.workload import MULTI_TURN
from benchmarks.perf import chaos
from benchmarks.perf.chaos import FaultWatch, QuotaWatch, Run, Scenario
from benchmarks.perf.harness import Stack
from nemo_gym.run_files.paths import RunPaths


class FakeFleet:
    def __init__(self, stats: list[dict[str, Any]] | None = None) -> None:
        self.faults: list[tuple[int, str]] = []
        self.replicas = stats or []

    def fault(self, replica: int, fault: str, after: int = 0) -> None:
        self.faults.append((replica, fault))

    def stats(self) -> list[dict[str, Any]]:
        return self.replicas


def _replica(ejections: int = 0, downs: int = 0, ago: float | None = None) -> dict[str, Any]:
    return {"ejections": ejections, "downs": downs, "last_ejected_s_ago": ago}


def _write(path: Path, keys: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(orjson.dumps({"_ng_task_index": t, "_ng_rollout_index": r}) + b"\n" for t, r in keys))


def _run(tmp_path: Path, rows: int) -> Run:
    output = tmp_path / "rollouts.jsonl"
    output.with_suffix(".collector.log").write_text("done\n")
    return Run(cast(Stack, None), tmp_path / "rows.jsonl", rows, output)


def test_the_line_count_reads_what_was_added(tmp_path: Path) -> None:
    path = tmp_path / "grows.jsonl"
    count = chaos.LineCount(path)
    assert count() == 0
    path.write_bytes(b"a\nb\n")
    assert count() == 2
    with open(path, "ab") as grows:
        grows.write(b"c\n")
    assert count() == 3 and count.offset == 6


def test_outcome_counts_exactly_once_failed_missing_and_both(tmp_path: Path) -> None:
    run = _run(tmp_path, rows=5)
    _write(run.output, [(0, 0), (1, 0), (1, 0), (2, 0)])
    _write(RunPaths(run.output).failures, [(2, 0), (3, 0)])
    outcome = run.outcome()
    assert {key: outcome[key] for key in ("rollouts", "duplicates", "failed_rollouts", "in_output_and_failures",
                                          "missing", "exactly_once")} == {
        "rollouts": 3, "duplicates": 1, "failed_rollouts": 1, "in_output_and_failures": 1, "missing": 1,
        "exactly_once": False}
    _write(run.output, [(i, 0) for i in range(5)])
    RunPaths(run.output).failures.unlink()
    assert run.outcome()["exactly_once"]


def test_the_rate_runs_from_the_window_start_to_its_end(tmp_path: Path) -> None:
    run = _run(tmp_path, rows=100)
    run.samples = [(0.0, 0), (1.0, 5), (2.0, 30), (4.0, 60), (6.0, 90), (7.0, 100)]
    assert run.rate(0.1) == pytest.approx((90 - 30) / (6.0 - 2.0))
    assert run.rate(0.5) == pytest.approx((90 - 60) / (6.0 - 4.0))
    run.samples = run.samples[:4]
    assert run.rate(0.1) is None  # never reached the window's end


def test_a_mid_run_fault_is_set_at_its_point_its_ejection_noted_and_a_killed_replica_brought_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    router = [[_replica(downs=1), _replica()]]  # replica 0 had been down once before the fault
    monkeypatch.setattr(chaos, "_router", lambda url: router[0])
    fleet = FakeFleet()
    watch = FaultWatch(Scenario("kill", (0,), mid_run=True), cast(FleetProcess, fleet), "url", rows=100,
                       deadline_s=30.0)
    assert not watch(0.0, int(chaos.FAULT_AT * 100) - 1) and fleet.faults == [] and watch.fault_at is None
    assert not watch(1.0, int(chaos.FAULT_AT * 100))
    assert fleet.faults == [(0, "kill")] and watch.fault_at is not None and watch.out_at == {}
    router[0] = [_replica(downs=2), _replica()]
    watch(2.0, 40)
    assert set(watch.out_at) == {0} and watch.back_at is None
    watch(3.0, int((chaos.FAULT_AT + chaos.BACK_AFTER) * 100))
    assert fleet.faults == [(0, "kill"), (0, "none")] and watch.back_at is not None
    assert not watch(29.0, 90) and watch(30.5, 90)  # the deadline counts from the first poll


def test_an_ejection_is_dated_by_the_router_and_a_fault_from_the_start_dates_from_the_first_poll(
        monkeypatch: pytest.MonkeyPatch) -> None:
    router = [[_replica(), _replica()]]
    monkeypatch.setattr(chaos, "_router", lambda url: router[0])
    fleet = FakeFleet()
    watch = FaultWatch(Scenario("http_5xx", (0, 1), mid_run=False), cast(FleetProcess, fleet), "url", rows=100,
                       deadline_s=30.0)
    watch(100.0, 0)
    assert fleet.faults == [] and watch.fault_at == 100.0  # set before the stack started
    router[0] = [_replica(ejections=1, ago=0.5), _replica()]
    watch(101.0, 3)
    assert set(watch.out_at) == {0} and watch.out_at[0] == pytest.approx(time.monotonic() - 0.5, abs=0.5)


def test_the_quota_watch_dates_the_first_refusal_and_stops_the_run_after_its_cap() -> None:
    fleet = FakeFleet([{"faulted": 0, "arrivals": [1.0, 2.0]}])
    watch = QuotaWatch(cast(FleetProcess, fleet), after=2)
    assert not watch(5.0, 10) and watch.refused_at is None
    fleet.replicas = [{"faulted": 1, "arrivals": [1.0, 2.0, 7.0]}]
    assert not watch(8.0, 10) and watch.refused_at == 7.0
    assert watch(7.0 + chaos.QUOTA_CAP_S + 1, 10)


def test_a_replica_answering_502_from_the_start_is_ejected_and_every_rollout_collected_once(tmp_path: Path) -> None:
    rows = 150
    rows_path = write_fleet_rows(tmp_path / "rows.jsonl", rows, MULTI_TURN)
    row = chaos.fault_run(tmp_path, Scenario("http_5xx", (0,), mid_run=False), rows_path, rows,
                          baseline={"wall_s": 60.0, "rollouts_per_s": 1.0})
    assert (row["exactly_once"], row["failed_rollouts"], row["exit_status"]) == (True, 0, 0)
    assert row["time_to_eject_s"] is not None and row["faulted_requests"] >= 1
    assert row["healthy_replicas_taken_out"] == 0
    assert row["router"][0]["ejections"] >= 1 and row["router"][0]["failures"]["http_5xx"] >= 1
