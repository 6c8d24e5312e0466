"""The dtype vLLM runs in when none is given: on a CPU without native bf16, vLLM's CPU build emulates bfloat16
arithmetic and is slower in it than in float32 (observed on an AVX2-only AMD EPYC, not measured here), so bfloat16
only where it pays.

This default is for collection, where speed is what counts. A trainer that needs the generator's log-probs to match
its own names the dtype instead (float32 on both sides is the only exact pairing: bf16 kernels differ between vLLM
and transformers), as examples/grpo does."""

from pathlib import Path

BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
CPUINFO = Path("/proc/cpuinfo")  # read at each call, so that tests can put either CPU kind in its place


def cpu_has_native_bf16(cpuinfo: Path | None = None) -> bool:
    try:
        text = (cpuinfo or CPUINFO).read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return bool(BF16_CPU_FLAGS.intersection(flags))


def default_vllm_dtype() -> str:
    """vLLM's CPU build's dtype: "bfloat16" on a CPU with native bf16, else "float32" (GPUs: device.py)."""
    return "bfloat16" if cpu_has_native_bf16() else "float32"
