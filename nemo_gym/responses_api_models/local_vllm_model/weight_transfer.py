"""The vLLM arguments that let a trainer push weights without a folder (VllmHttpGeneration's `gloo` and `nccl`
weight transports): vLLM's weight-transfer engine, `nccl` (vLLM's own) on a GPU, `nemo_gym_gloo` (ours, registered
by nemo_gym.vllm_plugin) on a CPU. The engine is only created here; nothing moves until a trainer connects."""

import json

from nemo_gym.vllm_plugin import GLOO_ENGINE


def weight_transfer_backend(gpu: bool) -> str:
    return "nccl" if gpu else GLOO_ENGINE


def weight_transfer_args(gpu: bool) -> list[str]:
    """`--weight-transfer-config` for a vLLM on a GPU (`gpu`) or a CPU."""
    return ["--weight-transfer-config", json.dumps({"backend": weight_transfer_backend(gpu)})]
