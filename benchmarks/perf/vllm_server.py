"""The real vLLM the benchmarks measure against (CPU build, the bundled SmolLM2-135M-Instruct), started and stopped
around a benchmark, or one already running (`--vllm-url`, for development); and how busy it was."""

import asyncio
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Optional

import httpx

from benchmarks.perf.lifecycle import child_process
from benchmarks.perf.results import REPO_ROOT
from nemo_gym.http_client import HttpClient
from nemo_gym.responses_api_models.local_vllm_model.dtype import default_vllm_dtype
from nemo_gym.server.supervisor import free_port

MODEL_DIR = Path(os.environ.get("NEMO_GYM_TEST_MODEL", REPO_ROOT / "models" / "SmolLM2-135M-Instruct"))
MODEL_NAME = "SmolLM2-135M-Instruct"


def _vllm_args(port: int) -> list[str]:
    """The vLLM server the tests use (tests/conftest.py), eager mode for a shorter cold start."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL_DIR),
            "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", default_vllm_dtype(), "--max-model-len", "2048", "--enforce-eager"]


async def wait_ready(base_url: str, popen: subprocess.Popen, timeout_s: float = 900) -> None:
    http = HttpClient(connect_timeout_s=2, read_timeout_s=5)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if popen.poll() is not None:
                raise RuntimeError(f"vLLM exited with {popen.returncode}")
            try:
                await http.get_json(f"{base_url}/models")
                return
            except Exception:  # noqa: BLE001 - anything short of an answer means "not yet"
                if time.monotonic() > deadline:
                    raise RuntimeError("vLLM not ready in time") from None
                await asyncio.sleep(1)
    finally:
        await http.aclose()


def pinned_to(cpus: Optional[str]) -> list[str]:
    """The prefix that runs a command on the cores `cpus` (a taskset list such as "0" or "0-3"); none for None."""
    return ["taskset", "-c", cpus] if cpus else []


@contextmanager
def vllm_server(workdir: Path, base_url: Optional[str] = None, *, env: Mapping[str, str] | None = None,
                cpus: Optional[str] = None) -> Iterator[str]:
    """Yield the /v1 base URL of a serving vLLM: `base_url` as given, or one started here and stopped after, also
    when the benchmark is stopped by a signal (see lifecycle). A started one gets `env` on top of ours and, with
    `cpus` (a taskset list such as "0"), runs on those cores only."""
    if base_url:
        yield base_url.rstrip("/")
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = [*pinned_to(cpus), *_vllm_args(port)]
    with open(workdir / "vllm.log", "wb") as log, \
            child_process(command, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", **(env or {})}, stdout=log,
                          stderr=subprocess.STDOUT) as popen:
        started = time.monotonic()
        asyncio.run(wait_ready(url, popen))
        print(f"vLLM ready after {time.monotonic() - started:.0f} s", flush=True)
        yield url


class IdleMonitor:
    """Polls vLLM's `vllm:num_requests_running` gauge every `poll_s`; a sample is (Unix time, nothing running).

    Each poll is a request vLLM's API server answers, so a benchmark whose vLLM has one core to itself polls
    less often. A poll vLLM does not answer in time is counted in `missed`, not guessed."""

    def __init__(self, base_url: str, poll_s: float = 0.05) -> None:
        self.url = f"{base_url.removesuffix('/v1')}/metrics"
        self.poll_s = poll_s
        self.samples: list[tuple[float, bool]] = []
        self.missed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _running(self, client: httpx.Client) -> float:
        for line in client.get(self.url).text.splitlines():
            if line.startswith("vllm:num_requests_running"):
                return float(line.rsplit(" ", 1)[1])
        raise RuntimeError(f"{self.url} has no vllm:num_requests_running gauge")

    def _run(self) -> None:
        with httpx.Client(trust_env=False, timeout=5) as client:
            while not self._stop.wait(self.poll_s):
                try:
                    self.samples.append((time.time(), self._running(client) == 0))
                except httpx.HTTPError:
                    self.missed += 1

    @contextmanager
    def watching(self) -> Iterator["IdleMonitor"]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    @property
    def idle_fraction(self) -> float:
        return idle_fraction(self.samples)


def idle_fraction(samples: list[tuple[float, bool]], start: float = float("-inf"), end: float = float("inf")) -> float:
    """Share of the (time, idle) samples taken in [start, end] that saw vLLM idle; NaN without one."""
    window = [idle for at, idle in samples if start <= at <= end]
    return round(sum(window) / len(window), 3) if window else float("nan")
