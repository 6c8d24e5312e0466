"""local_vllm_model's `enable_weight_updates`: vLLM's dev-mode endpoints only when asked for, and only on loopback."""

import json

import pytest

from nemo_gym.config.servers import ServerSpec
from nemo_gym.errors import ConfigError
from nemo_gym.responses_api_models.local_vllm_model.app import LocalVLLMModelServer
from nemo_gym.server.base import server_settings


def spec(**values) -> ServerSpec:
    return ServerSpec("policy_model", "responses_api_models", "local_vllm_model", {"model_path": "m", **values})


def test_dev_mode_only_when_weight_updates_are_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")  # inherited from the caller's shell: must not leak through
    assert "VLLM_SERVER_DEV_MODE" not in LocalVLLMModelServer(spec()).vllm_env()
    server = LocalVLLMModelServer(spec(enable_weight_updates=True))
    assert server.vllm_env()["VLLM_SERVER_DEV_MODE"] == "1"
    command = server.vllm_command(8000)
    assert command[command.index("--host") + 1] == "127.0.0.1"


@pytest.mark.parametrize("args", [["--host", "0.0.0.0"], ["--enforce-eager", "--host=10.1.2.3"],
                                  ["--host", "127.0.0.1", "--host", "::"]])
def test_weight_updates_refuse_a_non_loopback_vllm_host(args: list[str]) -> None:
    with pytest.raises(ConfigError, match="enable_weight_updates.*must stay on 127.0.0.1"):
        server_settings(LocalVLLMModelServer, spec(enable_weight_updates=True, vllm_args=args))
    server_settings(LocalVLLMModelServer, spec(vllm_args=args))  # without dev mode, the user's choice


def test_weight_updates_accept_loopback_hosts() -> None:
    settings = server_settings(LocalVLLMModelServer, spec(enable_weight_updates=True,
                                                          vllm_args=["--host", "localhost", "--host=::1"]))
    assert settings.enable_weight_updates


@pytest.mark.parametrize("gpu, backend", [(False, "nemo_gym_gloo"), (True, "nccl")])
def test_weight_updates_start_the_weight_transfer_engine_of_the_device(gpu: bool, backend: str) -> None:
    assert "--weight-transfer-config" not in LocalVLLMModelServer(spec()).vllm_command(8000)
    server = LocalVLLMModelServer(spec(enable_weight_updates=True, vllm_args=["--enforce-eager"]))
    server.gpu = gpu  # both devices, whatever this machine has
    command = server.vllm_command(8000)
    assert json.loads(command[command.index("--weight-transfer-config") + 1]) == {"backend": backend}
    own = ["--weight-transfer-config", '{"backend": "ipc"}']  # the user's own choice comes later, so it wins
    command = LocalVLLMModelServer(spec(enable_weight_updates=True, vllm_args=own)).vllm_command(8000)
    assert command[-2:] == own
