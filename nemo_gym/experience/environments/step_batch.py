"""What every environment's `step` does with its batch: find each sample's last assistant message, and pack the
per-sample results into an EnvironmentReturn."""

from typing import Any, Optional, Sequence

import torch

from nemo_gym.experience.environments.interfaces import EnvironmentReturn
from nemo_gym.experience.errors import EnvironmentStepError


def check_batch(message_log_batch: Sequence[Any], metadata: Sequence[Any]) -> None:
    if len(message_log_batch) != len(metadata):
        raise EnvironmentStepError(
            f"step got {len(message_log_batch)} message logs but {len(metadata)} metadata entries")


def last_assistant_content(message_log: Sequence[dict[str, Any]], sample: int) -> str:
    """The content of the sample's last assistant message: the turn being scored."""
    for message in reversed(message_log):
        if message.get("role") == "assistant":
            content = message.get("content")
            if content is None:
                return ""
            if not isinstance(content, str):
                raise EnvironmentStepError(
                    f"sample {sample}: the last assistant message's content is {type(content).__name__}, not text")
            return content
    raise EnvironmentStepError(f"sample {sample}: the message log has no assistant message to score")


def environment_return(observations: list[dict[str, str]], metadata: list[Optional[dict[str, Any]]],
                       rewards: Sequence[float], terminateds: Sequence[bool],
                       answers: list[Optional[str]]) -> EnvironmentReturn:
    """An EnvironmentReturn without next stop strings."""
    return EnvironmentReturn(
        observations=observations,
        metadata=metadata,
        next_stop_strings=[None] * len(observations),
        rewards=torch.tensor(list(rewards), dtype=torch.float32),
        terminateds=torch.tensor(list(terminateds), dtype=torch.bool),
        answers=answers,
    )
