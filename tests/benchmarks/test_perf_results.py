"""The results writer: what a results file records, and a failed run recorded as a failure, never as figures."""

import json
import signal
from pathlib import Path
from typing import Iterator

import pytest

from benchmarks.perf.figure_tables import source
from benchmarks.perf.results import BenchmarkFailed, loaded_at_start, recording


@pytest.fixture(autouse=True)
def _keep_pytest_signal_handlers() -> Iterator[None]:
    """`recording` installs the benchmarks' signal handlers; give pytest its own back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_results_file_records_the_machine_the_command_and_ratios_first(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    with recording("bench", output=output) as recorder:
        recorder.write({"ours_vs_baseline": 1.5}, {"raw": [1, 2]})
    report = json.loads(output.read_text())
    assert list(report)[:6] == ["benchmark", "status", "command", "machine", "wall_s", "ratios"]
    assert report["status"] == "ok" and report["ratios"] == {"ours_vs_baseline": 1.5} and report["raw"] == [1, 2]
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["cpu"] and len(machine["load_average_at_start"].split()) == 3
    assert set(machine["cpu_flags"]) >= {"avx512_bf16", "amx_bf16"}
    assert machine["versions"]["orjson"]


@pytest.mark.parametrize("error", [BenchmarkFailed("3 of 100 rollouts failed"), RuntimeError("vLLM exited")])
def test_a_failed_run_is_written_as_failed_without_figures(error: Exception, tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    with pytest.raises((SystemExit, RuntimeError)):
        with recording("bench", output=output):
            raise error
    report = json.loads(output.read_text())
    assert report["status"] == "failed" and str(error) in report["error"] and report["ratios"] == {}


def test_a_run_started_above_the_core_count_is_marked_loaded_in_its_file_and_the_docs(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    with recording("bench", output=output) as recorder:
        recorder.write({}, {})
    machine = json.loads(output.read_text())["machine"]
    assert len(machine["load_average_at_end"].split()) == 3
    report = {"benchmark": "bench", "command": "python -m benchmarks.perf.bench",
              "machine": {**machine, "cores": 2, "load_average_at_start": "2.50 1.00 1.00"}}
    assert loaded_at_start(report["machine"]) and "**loaded**: above its 2 cores" in source(report)
    report["machine"]["load_average_at_start"] = "1.90 3.00 3.00"  # the one-minute figure is the start's
    assert not loaded_at_start(report["machine"]) and "loaded" not in source(report)
