"""Shared fixtures. The real vLLM server is started once per test session (its cold start is minutes on CPU)."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from nemo_gym.responses_api_models.local_vllm_model.dtype import default_vllm_dtype
from tests.helpers.requirements import REQUIRE_ALL_VAR, require_all
from tests.helpers.stack import REPO_ROOT, free_port

MODEL_DIR = Path(os.environ.get("NEMO_GYM_TEST_MODEL", REPO_ROOT / "models" / "SmolLM2-135M-Instruct"))
MODEL_NAME = "SmolLM2-135M-Instruct"
# Task indices of the math example rows (arithmetic_example.jsonl, = generate_rows(n, seed=0)) that the model answers
# correctly at temperature 0: probed against vLLM at 1, 4 and 16 concurrent requests, the same answers each time.
# It misses 1, 2, 3, 17 and 22; tests assert reward 1 on these rows, where its behaviour is deterministic.
GREEDY_SOLVED = frozenset([0, *range(4, 17), 18, 19, 20, 21, 23])


class VLLMServer:
    def __init__(self, base_url: str, model: str, cold_start_s: float, pid: int | None = None) -> None:
        self.base_url = base_url
        self.model = model
        self.cold_start_s = cold_start_s
        self.pid = pid  # None for a vLLM this session did not start


@contextmanager
def vllm_process(port: int, log_path: Path, timeout_s: float = 600) -> Iterator[VLLMServer]:
    """Start a real vLLM (CPU build) serving the bundled model on `port`; yield once it answers; stop it after.

    The process leads its own session, so `os.killpg(server.pid, ...)` reaches its workers too.
    """
    if not (MODEL_DIR / "config.json").is_file():
        pytest.fail(f"model not prepared at {MODEL_DIR}: run `bash scripts/setup.sh`")
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(MODEL_DIR), "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--dtype", default_vllm_dtype(), "--max-model-len", "2048",
        # Eager mode halves the CPU cold start at about the same generation speed.
        "--enforce-eager",
        "--enable-auto-tool-choice", "--tool-call-parser", "pythonic",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}
    started = time.monotonic()
    log = open(log_path, "ab")
    popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        while True:
            if popen.poll() is not None:
                pytest.fail(f"vLLM exited with {popen.returncode}:\n{log_path.read_text()[-4000:]}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - started > timeout_s:
                pytest.fail(f"vLLM not up after {timeout_s:.0f} s:\n{log_path.read_text()[-4000:]}")
            time.sleep(1)
        yield VLLMServer(base_url, MODEL_NAME, time.monotonic() - started, popen.pid)
    finally:
        try:
            os.killpg(popen.pid, signal.SIGTERM)
            popen.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(timeout=30)
        log.close()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """A real vLLM OpenAI-compatible server (CPU build) serving the bundled SmolLM2-135M-Instruct.

    NEMO_GYM_TEST_VLLM_BASE_URL=http://127.0.0.1:P/v1 reuses a vLLM already serving that model (development on a
    small machine); CI never sets it, so there the fixture always starts its own.
    """
    external = os.environ.get("NEMO_GYM_TEST_VLLM_BASE_URL")
    if external:
        yield VLLMServer(external.rstrip("/"), MODEL_NAME, 0.0)
        return
    with vllm_process(free_port(), tmp_path_factory.mktemp("vllm") / "vllm.log") as server:
        (REPO_ROOT / ".vllm_cold_start_s").write_text(f"{server.cold_start_s:.1f}\n")
        yield server


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run only where CUDA is; elsewhere they are deselected (not skipped), and the summary
    names them."""
    if _has_cuda():
        return
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]
        config.hook.pytest_deselected(items=gpu)
        config._nemo_gym_gpu_deselected = [item.nodeid for item in gpu]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Under NEMO_GYM_REQUIRE_ALL a skip from anywhere (not only tests.helpers.requirements) fails the test."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and require_all():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"skipped, and {REQUIRE_ALL_VAR}=1 allows no skips: {reason}"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    deselected = getattr(config, "_nemo_gym_gpu_deselected", [])
    if deselected:
        terminalreporter.write_sep("=", f"{len(deselected)} test(s) marked gpu deselected: no CUDA device here")
        for nodeid in deselected:
            terminalreporter.write_line(f"DESELECTED (gpu, no CUDA) {nodeid}")
