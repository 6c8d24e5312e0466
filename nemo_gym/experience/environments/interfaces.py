"""The contract between rollouts and an environment (NeMo RL's EnvironmentInterface).

`step` gets a batch of message logs — role and content only, never token ids — and each sample's environment
state (`extra_env_info`), and answers per sample: the observation message for the next turn, the new state (None
to keep the old one), stop strings for the next generation (None for none), the reward of this turn and whether
the episode ended. `step` may be a coroutine function; a synchronous one is run off the event loop.
"""

from abc import ABC, abstractmethod
from typing import Any, Awaitable, NamedTuple, Optional

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict


class EnvironmentReturn(NamedTuple):
    observations: list[dict[str, str]]  # {"role": ..., "content": ...}
    metadata: list[Optional[dict[str, Any]]]
    next_stop_strings: list[Optional[list[str]]]
    rewards: torch.Tensor  # (B,) float
    terminateds: torch.Tensor  # (B,) bool
    answers: Optional[list[Optional[str]]] = None  # what the environment extracted as the answer, if anything


class EnvironmentInterface(ABC):
    @abstractmethod
    def step(
        self, message_log_batch: list[list[dict[str, str]]], metadata: list[Optional[dict[str, Any]]]
    ) -> EnvironmentReturn | Awaitable[EnvironmentReturn]:
        """Score the last assistant turn of every sample and say what comes next."""

    def global_post_process_and_metrics(self, batch: BatchedDataDict) -> tuple[BatchedDataDict, dict[str, Any]]:
        """Environment-specific metrics over a finished batch (none by default)."""
        return batch, {}

    def shutdown(self) -> None:
        """Release what the environment holds (worker pools, sandboxes)."""
