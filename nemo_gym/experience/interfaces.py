"""The data a trainer exchanges with the experience layer (NeMo RL's names and fields).

A message log is a list of chat messages. Every message carries `token_ids` (a 1-D LongTensor: the exact tokens
this message contributes to the flattened sequence); assistant messages also carry `generation_logprobs` (a 1-D
float tensor, one entry per generated token) and, from backends that report it, `generation_weight_versions` (the
weight versions its tokens were generated on). Flattening a message log is concatenating its `token_ids`.
"""

from dataclasses import dataclass, field
from typing import Any, NotRequired, Optional, TypedDict

import torch

from nemo_gym.run_format import ROLLOUT_INDEX, TASK_INDEX

NEMO_GYM_TASK_INDEX_KEY = TASK_INDEX
NEMO_GYM_ROLLOUT_INDEX_KEY = ROLLOUT_INDEX


class LLMMessage(TypedDict):
    role: str
    content: str
    token_ids: torch.Tensor
    generation_logprobs: NotRequired[torch.Tensor]
    generation_weight_versions: NotRequired[tuple[int, ...]]


LLMMessageLogType = list[LLMMessage]


class DatumSpec(TypedDict):
    """One sample: its conversation so far and what its environment needs."""

    message_log: LLMMessageLogType
    extra_env_info: Optional[dict[str, Any]]  # per-sample environment state, e.g. the ground truth
    task_name: str  # which environment of `task_to_env` scores this sample
    length: NotRequired[int]  # tokens in message_log
    loss_multiplier: NotRequired[float]
    idx: NotRequired[int]  # the prompt's index in its dataset
    stop_strings: NotRequired[Optional[list[str]]]


@dataclass
class Completion:
    """One generated completion of a prompt: the whole conversation and its total reward."""

    message_log: LLMMessageLogType
    env_extras: Optional[dict[str, Any]]  # the environment's final state, or the verifier's extra fields
    truncated: bool
    reward: float
    logprobs_valid: bool = True  # False when the backend could not give a log-prob for every generated token
    # Every weight version its tokens were generated on, over all turns, ascending; more than one when weights
    # changed during the rollout; empty when the backend does not report versions (the agent path).
    generation_weight_versions: tuple[int, ...] = ()


@dataclass
class PromptGroupRecord:
    """All completions of one prompt (the unit a GRPO trainer normalizes rewards over)."""

    prompt_idx: int
    prompt: LLMMessageLogType
    extra_env_info: Optional[dict[str, Any]]
    metadata: dict[str, Any]  # at least `task_name`
    completions: list[Completion]
    rollout_metrics: dict[str, Any] = field(default_factory=dict)
    loss_multiplier: float = 1.0

    @property
    def rewards(self) -> list[float]:
        return [c.reward for c in self.completions]
