"""local_vllm_model starts vLLM with GPU arguments where `nvidia-smi -L` lists a GPU (bfloat16, a GPU memory
fraction, CUDA graphs: no --enforce-eager), and with today's CPU arguments otherwise. `nvidia-smi` here is a
script the test puts first on PATH, answering as the real one does on a GPU machine, on a machine whose driver is
gone, and not at all."""

import os
from pathlib import Path

import pytest

from nemo_gym.config.servers import ServerSpec
from nemo_gym.responses_api_models.local_vllm_model.app import LocalVLLMModelServer
from nemo_gym.responses_api_models.local_vllm_model.device import has_nvidia_gpu
from tests.helpers.cpu_kind import force_cpu_kind

H100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a1c2f7e-0000-0000-0000-000000000000)"
VLLM_ARGS = ["--enforce-eager", "--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]


def _fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str | None) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if script is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    # Only the fake (or nothing) can answer: the real one, where there is one, is not on this PATH.
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin" if script is not None else str(bin_dir))


def _command(settings: dict) -> list[str]:
    spec = ServerSpec("policy_model", "responses_api_models", "local_vllm_model",
                      {"model_path": "models/SmolLM2-135M-Instruct", "vllm_args": VLLM_ARGS, **settings})
    return LocalVLLMModelServer(spec).vllm_command(8000)


def _value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_a_listed_gpu_gets_gpu_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, f"echo '{H100}'")
    assert has_nvidia_gpu()
    command = _command({})
    assert _value(command, "--dtype") == "bfloat16" and _value(command, "--gpu-memory-utilization") == "0.85"
    assert "--enforce-eager" not in command
    assert command[-3:] == ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]
    tuned = _command({"gpu_memory_utilization": 0.5, "dtype": "float16"})
    assert _value(tuned, "--gpu-memory-utilization") == "0.5" and _value(tuned, "--dtype") == "float16"


@pytest.mark.parametrize(("cpu_kind", "dtype"), [("avx2", "float32"), ("avx512_bf16", "bfloat16")])
@pytest.mark.parametrize("script", [
    "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9",
    "exit 0",  # a driver with no device: lists nothing
    None,  # no nvidia-smi at all
])
def test_without_a_listed_gpu_the_cpu_arguments_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     script: str | None, cpu_kind: str, dtype: str) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, script)
    force_cpu_kind(cpu_kind, tmp_path, monkeypatch)
    assert not has_nvidia_gpu()
    command = _command({})
    assert _value(command, "--dtype") == dtype and "--gpu-memory-utilization" not in command
    assert command[-4:] == VLLM_ARGS  # --enforce-eager kept: it halves the CPU cold start
    assert os.environ["PATH"].startswith(str(tmp_path))
