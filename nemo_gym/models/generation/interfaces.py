"""NeMo RL's `nemo_rl.models.generation.interfaces` under our package name."""

from nemo_gym.experience.generation.interfaces import (
    GenerationConfig,
    GenerationDatumSpec,
    GenerationInterface,
    GenerationOutputSpec,
)

__all__ = ["GenerationConfig", "GenerationDatumSpec", "GenerationInterface", "GenerationOutputSpec"]
