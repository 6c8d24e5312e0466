"""A replica killed mid-run, through the real stack: ng_collect_rollouts -> simple_agent -> weather environment ->
vllm_model -> four simulated replicas (benchmarks/fleet). Every rollout is collected exactly once, none recorded as a
failure, and the replica gets new sessions once it is back.

Every wait is on state (lines in the output, requests in a replica). The simulated time is a lower bound on the
wall time, so the rollouts left after the revival take seconds whatever the load, well past the router's probe."""

import threading
import time
from pathlib import Path
from typing import Any, Callable

import orjson

from benchmarks.fleet.__main__ import DEFAULT_MODEL
from benchmarks.fleet.stack import fleet_process, write_fleet_rows
from benchmarks.fleet.workload import MULTI_TURN
from benchmarks.perf.harness import WEATHER_AGENT, run_collector, weather_stack
from nemo_gym.run_files.paths import RunPaths

ROWS = 300
IN_FLIGHT = 32
KILLED = 1
WAIT_S = 300.0


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _wait(condition: Callable[[], bool], what: str, alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert alive(), f"the collector ended before {what}"
        assert time.monotonic() < deadline, f"no {what} after {WAIT_S:.0f} s"
        time.sleep(0.02)


def test_a_replica_killed_mid_run_costs_no_rollout_and_gets_sessions_again(tmp_path: Path) -> None:
    rows = write_fleet_rows(tmp_path / "rows.jsonl", ROWS, MULTI_TURN)
    output = tmp_path / "rollouts.jsonl"
    result: dict[str, Any] = {}
    errors: list[BaseException] = []
    with fleet_process(tmp_path / "fleet", replicas=4, time_scale=10.0, workload=MULTI_TURN) as fleet:
        urls = "[" + ",".join(fleet.base_urls) + "]"
        with weather_stack(tmp_path / "stack", model_base_url=urls, model_name=DEFAULT_MODEL) as stack:

            def collect() -> None:
                try:
                    result.update(run_collector(stack, rows, output, WEATHER_AGENT, IN_FLIGHT,
                                                "+adaptive_concurrency=false", timeout_s=WAIT_S))
                except BaseException as error:  # noqa: BLE001 - reported by the test below
                    errors.append(error)

            collector = threading.Thread(target=collect)
            collector.start()
            alive = collector.is_alive
            _wait(lambda: _lines(output) >= ROWS // 5 and fleet.stats()[KILLED]["running"] > 0,
                  "replica busy a fifth into the run", alive)
            at_kill = _lines(output)
            fleet.kill(KILLED)
            _wait(lambda: _lines(output) >= at_kill + ROWS // 10, "progress after the kill", alive)
            fleet.revive(KILLED)
            admitted_at_revival = fleet.stats()[KILLED]["admitted"]
            collector.join(WAIT_S)
            final = fleet.stats()
    assert not errors, errors
    assert (result["succeeded"], result["failed"]) == (ROWS, 0)
    keys = [(row["_ng_task_index"], row["_ng_rollout_index"])
            for row in map(orjson.loads, output.read_bytes().splitlines())]
    assert len(keys) == len(set(keys)) == ROWS  # each rollout once
    failures = RunPaths(output).failures
    assert not failures.exists() or failures.read_bytes() == b""
    assert final[KILLED]["admitted"] > admitted_at_revival  # new sessions reached it after its revival
    assert all(replica["alive"] for replica in final)
