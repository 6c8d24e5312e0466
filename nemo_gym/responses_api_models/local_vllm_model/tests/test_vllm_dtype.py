"""vLLM's default dtype follows the CPU: bfloat16 only with native bf16 instructions. Both kinds are forced here
(tests/helpers/cpu_kind.py), so the verdict does not depend on the machine that runs it."""

from pathlib import Path

import pytest

from nemo_gym.responses_api_models.local_vllm_model.dtype import cpu_has_native_bf16, default_vllm_dtype
from tests.helpers.cpu_kind import force_cpu_kind, write_cpuinfo


def test_native_bf16_flags_are_detected(tmp_path: Path) -> None:
    assert cpu_has_native_bf16(write_cpuinfo(tmp_path / "a", "fpu sse avx2 avx512f avx512_bf16"))
    assert cpu_has_native_bf16(write_cpuinfo(tmp_path / "b", "fpu avx2 amx_bf16 amx_tile"))


def test_avx2_only_and_unreadable_cpuinfo_mean_no_bf16(tmp_path: Path) -> None:
    assert not cpu_has_native_bf16(write_cpuinfo(tmp_path / "a", "fpu sse avx avx2 fma avx512f"))
    assert not cpu_has_native_bf16(tmp_path / "missing")


@pytest.mark.parametrize(("kind", "expected"), [("avx2", "float32"), ("avx512_bf16", "bfloat16")])
def test_the_default_dtype_of_each_cpu_kind(kind: str, expected: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    force_cpu_kind(kind, tmp_path, monkeypatch)
    assert default_vllm_dtype() == expected
