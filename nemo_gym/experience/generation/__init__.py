"""Generation backends: token prompts in, token completions with log-probs out (see interfaces.py).

`VllmHttpGeneration` talks to vLLM servers over HTTP; `HFGeneration` runs transformers in this process and is
imported only when first used, so importing this package does not load transformers' model code.
"""

from typing import TYPE_CHECKING, Any

from nemo_gym.experience.generation.interfaces import (
    GenerationConfig,
    GenerationDatumSpec,
    GenerationInterface,
    GenerationOutputSpec,
)
from nemo_gym.experience.generation.vllm_http import VllmHttpGeneration

if TYPE_CHECKING:
    from nemo_gym.experience.generation.hf import HFGeneration

__all__ = [
    "GenerationConfig",
    "GenerationDatumSpec",
    "GenerationInterface",
    "GenerationOutputSpec",
    "HFGeneration",
    "VllmHttpGeneration",
]


def __getattr__(name: str) -> Any:
    if name == "HFGeneration":
        from nemo_gym.experience.generation.hf import HFGeneration

        return HFGeneration
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
