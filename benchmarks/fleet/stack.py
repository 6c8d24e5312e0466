"""A simulated fleet in a process of its own, and the rows for it: what the fleet benchmark and the fleet tests put
the real stack (collector, simple_agent, the weather environment, vllm_model) in front of.

The rows are the weather task of the other benchmarks (benchmarks/perf/harness.py), asked in a user message padded
to the workload's prompt length and marked `[turns=N]`, so each rollout makes the workload's number of model calls
(chat.py plays the model).
"""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import orjson

from benchmarks.fleet.tokens import CHARS_PER_TOKEN
from benchmarks.fleet.workload import Workload
from benchmarks.perf.harness import weather_row
from nemo_gym.http_client import HttpClient, get_json_blocking
from nemo_gym.sync_bridge import run_sync

READY_TIMEOUT_S = 60.0


@dataclass
class FleetProcess:
    popen: subprocess.Popen[bytes]
    base_urls: list[str]
    control_url: str

    def kill(self, replica: int) -> None:
        self._control("/fleet/kill", {"replica": replica})

    def revive(self, replica: int) -> None:
        self._control("/fleet/revive", {"replica": replica})

    def fault(self, replica: int, fault: str, after: int = 0) -> None:
        """Give `replica` a fault (benchmarks/fleet/fleet.py names them; "none" clears it)."""
        self._control("/fleet/fault", {"replica": replica, "fault": fault, "after": after})

    def stats(self) -> list[dict[str, Any]]:
        """Every replica's counters (fleet.snapshot_dict) and fault (ServedReplica.fault_dict), in replica order."""
        return list(get_json_blocking(f"{self.control_url}/fleet/stats", timeout_s=30)["replicas"])

    def _control(self, path: str, body: dict[str, Any]) -> None:
        run_sync(_post(f"{self.control_url}{path}", body))


async def _post(url: str, body: dict[str, Any]) -> None:
    http = HttpClient()
    try:
        await http.post_json(url, body, timeout_s=30)
    finally:
        await http.aclose()


@contextmanager
def fleet_process(workdir: Path, replicas: int, time_scale: float, workload: Workload,
                  slow: tuple[tuple[int, float], ...] = ()) -> Iterator[FleetProcess]:
    """`python -m benchmarks.fleet` with these settings, until the block ends."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / f"fleet-{os.getpid()}-{time.monotonic_ns()}.json"
    command = [sys.executable, "-m", "benchmarks.fleet", "--replicas", str(replicas), "--time-scale", str(time_scale),
               "--workload", workload.name, "--ready-file", str(ready),
               *[arg for index, factor in slow for arg in ("--slow", f"{index}:{factor}")]]
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)}
    with open(workdir / "fleet.log", "ab") as log:
        popen = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the simulated fleet did not start: {(workdir / 'fleet.log').read_text()[-2000:]}")
            time.sleep(0.05)
        info = orjson.loads(ready.read_bytes())
        yield FleetProcess(popen, info["base_urls"], info["control_url"])
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait()


def fleet_row(i: int, workload: Workload) -> dict[str, Any]:
    """Weather question `i`, padded to the workload's prompt length, asking for its number of turns."""
    row = weather_row(i, max_output_tokens=workload.max_tokens)
    question = row["responses_create_params"]["input"][0]["content"]
    padding = "words " * max(0, (workload.prompt_tokens * CHARS_PER_TOKEN - len(question)) // 6)
    row["responses_create_params"]["input"][0]["content"] = f"{question} [turns={workload.turns}] {padding}"
    row["responses_create_params"].pop("temperature", None)
    return row


def write_fleet_rows(path: Path, n: int, workload: Workload) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        for i in range(n):
            out.write(orjson.dumps(fleet_row(i, workload), option=orjson.OPT_APPEND_NEWLINE))
    return path
