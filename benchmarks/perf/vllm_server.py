"""The real vLLM the benchmarks measure against (CPU build, the bundled SmolLM2-135M-Instruct), started and stopped
around a benchmark, or one already running (`--vllm-url`, for development)."""

import asyncio
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

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


@contextmanager
def vllm_server(workdir: Path, base_url: Optional[str] = None) -> Iterator[str]:
    """Yield the /v1 base URL of a serving vLLM: `base_url` as given, or one started here and stopped after, also
    when the benchmark is stopped by a signal (see lifecycle)."""
    if base_url:
        yield base_url.rstrip("/")
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with open(workdir / "vllm.log", "wb") as log, \
            child_process(_vllm_args(port), env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}, stdout=log,
                          stderr=subprocess.STDOUT) as popen:
        started = time.monotonic()
        asyncio.run(wait_ready(url, popen))
        print(f"vLLM ready after {time.monotonic() - started:.0f} s", flush=True)
        yield url
