"""This package's vLLM plugin: vLLM calls `register` in each of its processes (the entry point
`nemo_gym = "nemo_gym.vllm_plugin:register"` in the group `vllm.general_plugins`, pyproject.toml).

It registers the CPU weight-transfer engine (nemo_gym.experience.generation.gloo_engine) in vLLM's
`WeightTransferEngineFactory` under `GLOO_ENGINE`, by module path: nothing of it is imported until a vLLM started
with `--weight-transfer-config '{"backend": "nemo_gym_gloo"}'` creates it. No vLLM code is patched.
"""

GLOO_ENGINE = "nemo_gym_gloo"


def register() -> None:
    from vllm.distributed.weight_transfer import WeightTransferEngineFactory

    try:
        WeightTransferEngineFactory.register_engine(GLOO_ENGINE, "nemo_gym.experience.generation.gloo_engine",
                                                    "GlooWeightTransferEngine")
    except ValueError:  # already registered in this process (vLLM may load its plugins more than once)
        pass
