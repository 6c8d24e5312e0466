"""Prompt groups as one training batch: the flattened token ids of every completion, exactly as generated.

Each completion's message log is flattened (its messages' `token_ids`, concatenated: the sequence the policy saw
and produced). Position t of every (batch, positions) tensor is about token t: `mask` is 1 where token t was
generated (an assistant message's token, the only ones with `generation_logprobs`), and `generation_logprobs`
holds the generation engine's log-prob of it there, 0 elsewhere.
"""

from dataclasses import dataclass
from typing import Sequence

import torch

from nemo_gym.experience.errors import TokenAlignmentError
from nemo_gym.experience.grpo.advantages import group_advantages
from nemo_gym.experience.interfaces import LLMMessageLogType, PromptGroupRecord
from nemo_gym.experience.turns.message_log import as_token_tensor


@dataclass(frozen=True)
class FlatCompletion:
    token_ids: torch.Tensor  # (T,) long
    mask: torch.Tensor  # (T,) float, 1 on generated tokens
    generation_logprobs: torch.Tensor  # (T,) float32, the engine's log-prob on generated tokens, 0 elsewhere


@dataclass(frozen=True)
class TrainingBatch:
    input_ids: torch.Tensor  # (B, L) long, right-padded
    lengths: torch.Tensor  # (B,) tokens of each sequence before padding
    mask: torch.Tensor  # (B, L) float32
    generation_logprobs: torch.Tensor  # (B, L) float32
    advantages: torch.Tensor  # (B,) float32
    rewards: torch.Tensor  # (B,) float32

    @property
    def num_generated_tokens(self) -> int:
        return int(self.mask.sum())

    @property
    def first_generated_position(self) -> int:
        """The first position any sequence of the batch generated a token at; the width when none did (a turn
        can end with no token generated), so that nothing is scored."""
        generated = self.mask.any(dim=0).nonzero()
        return int(generated[0]) if len(generated) else self.mask.shape[1]

    def rows(self, start: int, stop: int) -> "TrainingBatch":
        """Sequences [start, stop), trimmed to their longest one (a micro-batch)."""
        return self.select(torch.arange(start, min(stop, len(self.lengths))))

    def select(self, indices: torch.Tensor) -> "TrainingBatch":
        """The sequences at `indices`, in that order, trimmed to their longest one."""
        width = int(self.lengths[indices].max())
        return TrainingBatch(self.input_ids[indices, :width], self.lengths[indices], self.mask[indices, :width],
                             self.generation_logprobs[indices, :width], self.advantages[indices],
                             self.rewards[indices])


def flatten_completion(message_log: LLMMessageLogType) -> FlatCompletion:
    """One completion's tokens, generated-token mask and generation log-probs; TokenAlignmentError when an
    assistant message has no log-prob for each of its tokens (nothing to compare or to take the ratio against)."""
    ids, mask, logprobs = [], [], []
    for turn, message in enumerate(message_log):
        tokens = as_token_tensor(message["token_ids"])
        ids.append(tokens)
        if message["role"] == "assistant":
            generated = message.get("generation_logprobs")
            if generated is None or len(generated) != len(tokens):
                raise TokenAlignmentError(
                    f"message {turn}: assistant message with {len(tokens)} token ids but "
                    f"{'no' if generated is None else len(generated)} generation log-probs")
            mask.append(torch.ones(len(tokens)))
            logprobs.append(torch.as_tensor(generated, dtype=torch.float32).flatten())
        else:
            mask.append(torch.zeros(len(tokens)))
            logprobs.append(torch.zeros(len(tokens)))
    if not ids:
        raise TokenAlignmentError("an empty message log has no tokens to train on")
    return FlatCompletion(torch.cat(ids), torch.cat(mask), torch.cat(logprobs))


def training_batch(groups: Sequence[PromptGroupRecord], pad_token_id: int) -> TrainingBatch:
    """Every completion of `groups`, in order, with its group-normalized advantage."""
    if not groups:
        raise ValueError("training_batch needs at least one prompt group")
    sizes = {len(g.completions) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"every prompt group needs the same number of completions, got sizes {sorted(sizes)}")
    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float32)
    flats = [flatten_completion(c.message_log) for g in groups for c in g.completions]
    lengths = torch.tensor([len(f.token_ids) for f in flats], dtype=torch.long)
    width = int(lengths.max())
    input_ids = torch.full((len(flats), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(flats), width), dtype=torch.float32)
    generation_logprobs = torch.zeros((len(flats), width), dtype=torch.float32)
    for row, flat in enumerate(flats):
        n = len(flat.token_ids)
        input_ids[row, :n], mask[row, :n], generation_logprobs[row, :n] = (
            flat.token_ids, flat.mask, flat.generation_logprobs)
    return TrainingBatch(input_ids, lengths, mask, generation_logprobs, group_advantages(rewards).flatten(),
                         rewards.flatten())
