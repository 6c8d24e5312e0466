"""Either CPU kind on any machine: a fake /proc/cpuinfo for the code that reads the CPU's flags, so that a test runs
the branch of an AVX2-only CPU and the branch of a CPU with native bf16 whichever machine runs the suite."""

from pathlib import Path

import pytest

from nemo_gym.responses_api_models.local_vllm_model import dtype

CPU_FLAGS = {
    "avx2": "fpu sse sse2 avx avx2 fma",
    "avx512_bf16": "fpu sse sse2 avx avx2 fma avx512f avx512bw avx512_bf16",
}


def write_cpuinfo(path: Path, flags: str) -> Path:
    path.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n")
    return path


def force_cpu_kind(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every reader of the CPU's flags in nemo_gym see a CPU of `kind` (a key of CPU_FLAGS)."""
    monkeypatch.setattr(dtype, "CPUINFO", write_cpuinfo(tmp_path / f"cpuinfo_{kind}", CPU_FLAGS[kind]))
