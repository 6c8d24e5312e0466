"""Which vLLM arguments fit this machine: an NVIDIA GPU (seen by `nvidia-smi -L`, the same check scripts/setup.sh
makes to install vLLM's CUDA build) runs bfloat16 with CUDA graphs and a share of the GPU's memory; a CPU keeps the
CPU build's choices (dtype by CPU features, --enforce-eager where the config asks for it)."""

import shutil
import subprocess

from nemo_gym.responses_api_models.local_vllm_model.dtype import default_vllm_dtype

CPU_ONLY_ARGS = frozenset({"--enforce-eager"})  # halves a CPU cold start; on a GPU it turns CUDA graphs off


def has_nvidia_gpu() -> bool:
    """Whether `nvidia-smi -L` lists at least one GPU."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return False
    try:
        listed = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and any(line.startswith("GPU ") for line in listed.stdout.splitlines())


def device_args(gpu: bool, dtype: str | None, gpu_memory_utilization: float, extra: list[str]) -> list[str]:
    """--dtype (given, or the device's default), the GPU memory fraction on a GPU, then `extra` (less the CPU-only
    flags on a GPU)."""
    if not gpu:
        return ["--dtype", dtype or default_vllm_dtype(), *extra]
    return ["--dtype", dtype or "bfloat16", "--gpu-memory-utilization", f"{gpu_memory_utilization:g}",
            *(arg for arg in extra if arg not in CPU_ONLY_ARGS)]
