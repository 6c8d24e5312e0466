"""vLLM's default dtype follows the CPU: bfloat16 only with native bf16 instructions."""

from pathlib import Path

from nemo_gym.responses_api_models.local_vllm_model.dtype import cpu_has_native_bf16


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    return path


def test_native_bf16_flags_are_detected(tmp_path: Path) -> None:
    assert cpu_has_native_bf16(_cpuinfo(tmp_path, "fpu sse avx2 avx512f avx512_bf16"))
    assert cpu_has_native_bf16(_cpuinfo(tmp_path, "fpu avx2 amx_bf16 amx_tile"))


def test_avx2_only_and_unreadable_cpuinfo_mean_no_bf16(tmp_path: Path) -> None:
    assert not cpu_has_native_bf16(_cpuinfo(tmp_path, "fpu sse avx avx2 fma avx512f"))
    assert not cpu_has_native_bf16(tmp_path / "missing")
