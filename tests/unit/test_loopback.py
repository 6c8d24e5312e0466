"""The one loopback rule (nemo_gym.loopback.is_loopback) and the places that rely on it: the proxy rule, the
weight-update check of a local vLLM's settings, the gloo transport's device choice."""

import pytest
from pydantic import ValidationError

from nemo_gym.config.model_servers import LocalVLLMModelSettings
from nemo_gym.loopback import is_loopback


@pytest.mark.parametrize("host, expected", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("localhost", True), ("LOCALHOST.", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.1", False), ("localhost.example", False), ("vllm.lan", False),
    ("", False),
])
def test_is_loopback(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_weight_updates_allow_any_loopback_host(host: str) -> None:
    LocalVLLMModelSettings(model_path="m", enable_weight_updates=True, vllm_args=["--host", host])


@pytest.mark.parametrize("args", [["--host", "0.0.0.0"], ["--host=10.1.2.3"], ["--host", "127.0.0.1", "--host=::"]])
def test_weight_updates_refuse_a_host_off_this_machine(args: list[str]) -> None:
    with pytest.raises(ValidationError, match="must stay on 127.0.0.1"):
        LocalVLLMModelSettings(model_path="m", enable_weight_updates=True, vllm_args=args)


def test_the_rule_is_defined_once() -> None:
    import nemo_gym.experience.generation.gloo_wire as gloo_wire
    import nemo_gym.http_wire as http_wire
    import nemo_gym.proxies as proxies
    import nemo_gym.rollout_collection.config_preflight as config_preflight

    assert all(module.is_loopback is is_loopback for module in (gloo_wire, http_wire, proxies, config_preflight))
