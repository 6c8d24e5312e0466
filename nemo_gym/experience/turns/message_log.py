"""Message logs as token sequences: flattening, padding and the role/content view environments get."""

from typing import Any, Sequence

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.interfaces import LLMMessageLogType


def as_token_tensor(token_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    if isinstance(token_ids, torch.Tensor):
        return token_ids.to(dtype=torch.long).flatten()
    return torch.tensor(list(token_ids), dtype=torch.long)


def flat_token_ids(message_log: LLMMessageLogType) -> torch.Tensor:
    """The whole conversation as one token sequence."""
    if not message_log:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([as_token_tensor(m["token_ids"]) for m in message_log])


def message_log_length(message_log: LLMMessageLogType) -> int:
    return sum(len(m["token_ids"]) for m in message_log)


def batched_message_log_to_flat_message(
    message_log_batch: Sequence[LLMMessageLogType], pad_token_id: int
) -> tuple[BatchedDataDict[Any], torch.Tensor]:
    """Right-padded token ids (B, max length) of every conversation, and each one's length."""
    flats = [flat_token_ids(log) for log in message_log_batch]
    lengths = torch.tensor([len(f) for f in flats], dtype=torch.long)
    width = int(lengths.max()) if len(flats) else 0
    padded = torch.full((len(flats), width), pad_token_id, dtype=torch.long)
    for row, flat in enumerate(flats):
        padded[row, : len(flat)] = flat
    return BatchedDataDict(token_ids=padded), lengths


def generation_weight_versions(message_log: LLMMessageLogType) -> tuple[int, ...]:
    """The weight versions of every assistant turn of a conversation together, ascending."""
    versions: set[int] = set()
    for message in message_log:
        versions.update(message.get("generation_weight_versions", ()))
    return tuple(sorted(versions))


def chat_view(message_log: LLMMessageLogType) -> list[dict[str, Any]]:
    """Role and content only: what an environment may see of a conversation."""
    return [{"role": m["role"], "content": m["content"]} for m in message_log]
