"""The bundled test model, and a real vLLM serving it (what the `vllm_server` fixture of conftest.py hands to tests)."""

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import httpx
import orjson
import pytest

from nemo_gym.responses_api_models.local_vllm_model.device import device_args, has_nvidia_gpu
from nemo_gym.responses_api_models.local_vllm_model.weight_transfer import weight_transfer_args
from tests.helpers.processes import stop_process_group
from tests.helpers.stack import REPO_ROOT, free_port

MODEL_DIR = Path(os.environ.get("NEMO_GYM_TEST_MODEL", REPO_ROOT / "models" / "SmolLM2-135M-Instruct"))
MODEL_NAME = "SmolLM2-135M-Instruct"
# Task indices of the math example rows (arithmetic_example.jsonl, = generate_rows(n, seed=0)) that the model answers
# correctly at temperature 0: probed against vLLM at 1, 4 and 16 concurrent requests, the same answers each time.
# It misses 1, 2, 3, 17 and 22; tests assert reward 1 on these rows, where its behaviour is deterministic.
GREEDY_SOLVED = frozenset([0, *range(4, 17), 18, 19, 20, 21, 23])
# The test vLLM serves float32 on every CPU kind: exactness checks compare it with a float32 trainer, and only
# float32 on both sides agrees exactly (bf16 kernels differ between vLLM and transformers). local_vllm_model's own
# default (bfloat16 on a CPU with native bf16) is tested by forcing each CPU kind (tests/helpers/cpu_kind.py); a
# bfloat16 vLLM has its own test (tests/experience/test_bf16_generator_vllm.py).
TEST_CPU_DTYPE = "float32"


class VLLMServer:
    def __init__(self, base_url: str, model: str, cold_start_s: float, pid: int | None = None) -> None:
        self.base_url = base_url
        self.model = model
        self.cold_start_s = cold_start_s
        self.pid = pid  # None for a vLLM this session did not start
        self.port = int(base_url.rsplit(":", 1)[1].split("/", 1)[0])


BIND_ATTEMPTS = 3


def _start(cmd: list[str], env: dict[str, str], log_path: Path, timeout_s: float) -> tuple[subprocess.Popen, str]:
    """Start vLLM and wait until it answers; returns (process, "") or (exited process, the log since its start)."""
    with open(log_path, "ab") as log:
        offset = log.tell()
        popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base_url = f"http://127.0.0.1:{cmd[cmd.index('--port') + 1]}/v1"
    started = time.monotonic()
    try:
        while popen.poll() is None:
            try:
                if httpx.get(f"{base_url}/models", timeout=2, trust_env=False).status_code == 200:
                    return popen, ""
            except httpx.TransportError:
                pass
            if time.monotonic() - started > timeout_s:
                pytest.fail(f"vLLM not up after {timeout_s:.0f} s:\n{log_path.read_text()[-4000:]}")
            time.sleep(1)
    except BaseException:
        stop_process_group(popen, grace_s=30)
        raise
    with open(log_path, "rb") as log:
        log.seek(offset)
        return popen, log.read().decode(errors="replace")


@contextmanager
def vllm_process(port: Optional[int], log_path: Path, timeout_s: float = 600,
                 enable_weight_updates: bool = False, dtype: str = TEST_CPU_DTYPE) -> Iterator[VLLMServer]:
    """Start a real vLLM (CPU build) serving the bundled model on `port`; yield once it answers; stop it after.

    With `port` None a free port is chosen, and chosen again when another process takes it before vLLM binds it
    (a free port is only free until someone binds it). The process leads its own session, so
    `os.killpg(server.pid, ...)` reaches its workers too. `enable_weight_updates` turns on vLLM's dev-mode endpoints
    (VLLM_SERVER_DEV_MODE=1), which VllmHttpGeneration.update_weights uses; the server binds 127.0.0.1 either way.
    `dtype` is the CPU build's (on a GPU, bfloat16 as local_vllm_model would).
    """
    if not (MODEL_DIR / "config.json").is_file():
        pytest.fail(f"model not prepared at {MODEL_DIR}: run `bash scripts/setup.sh`")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}
    env.pop("VLLM_SERVER_DEV_MODE", None)
    if enable_weight_updates:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    started = time.monotonic()
    gpu = has_nvidia_gpu()
    for attempt in range(1, BIND_ATTEMPTS + 1):
        chosen = port or free_port()
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(MODEL_DIR), "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(chosen), "--max-model-len", "2048",
            # The arguments local_vllm_model would use on this machine, but a pinned dtype on a CPU: eager mode
            # (which halves the cold start at about the same generation speed); on a GPU, bfloat16, a memory share
            # and CUDA graphs.
            *device_args(gpu, None if gpu else dtype, 0.5, ["--enforce-eager"]),
            "--enable-auto-tool-choice", "--tool-call-parser", "pythonic",
            # The gloo/nccl weight transports need vLLM's weight-transfer engine; the disk transport ignores it.
            *(weight_transfer_args(gpu) if enable_weight_updates else []),
        ]
        popen, exit_log = _start(cmd, env, log_path, timeout_s)
        if not exit_log:
            break
        if port is None and "Address already in use" in exit_log and attempt < BIND_ATTEMPTS:
            continue
        pytest.fail(f"vLLM exited with {popen.returncode}:\n{exit_log[-4000:]}")
    try:
        yield VLLMServer(f"http://127.0.0.1:{chosen}/v1", MODEL_NAME, time.monotonic() - started, popen.pid)
    finally:
        stop_process_group(popen, grace_s=30)


def restore_bundled_weights(server: VLLMServer) -> None:
    """Load the bundled model's own weights into `server` as version 0 (a dev-mode vLLM): what a test that pushed
    weights does before another test may use the server. The load pauses and resumes generation and drops the
    prefix cache (VllmHttpGeneration.update_weights)."""
    from transformers import AutoTokenizer

    from nemo_gym.experience.generation import VllmHttpGeneration

    pad_token_id = AutoTokenizer.from_pretrained(MODEL_DIR).pad_token_id
    config = {"model_name": server.model, "max_seq_len": 2048, "pad_token_id": pad_token_id, "max_new_tokens": 1}
    with VllmHttpGeneration(config, server.base_url) as policy:
        policy.update_weights(MODEL_DIR, 0)


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def check_math_rollouts(output: Path, expected_rows: int) -> list[dict]:
    """Every key once, binary rewards, every greedy-solved row rewarded 1, and the aggregate metrics beside it."""
    rows = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    assert len(rows) == expected_rows
    keys = {(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows}
    assert len(keys) == expected_rows
    for row in rows:
        assert row["reward"] in (0.0, 1.0)
        assert row["response"]["object"] == "response" and row["response"]["output"]
        assert row["agent_ref"]["name"] == "math_simple_agent"
    missed = {r["_ng_task_index"]: r["response"]["output"] for r in rows
              if r["_ng_task_index"] in GREEDY_SOLVED and r["reward"] != 1.0}
    assert not missed, f"greedy answers the model gets right scored 0: {missed}"
    metrics = orjson.loads(output.with_name(f"{output.stem}_aggregate_metrics.json").read_bytes())
    assert metrics[0]["agent_ref"]["name"] == "math_simple_agent"
    assert metrics[0]["agent_metrics"]["mean/reward"] == pytest.approx(sum(r["reward"] for r in rows) / len(rows))
    return rows
