"""The trainer's log-probs of token ids a generation engine produced, under a transformers causal LM.

Position t of the result is log p(token t | tokens before t); position 0 (no context) and padding are 0. The model
runs on exactly the given ids, never on a re-tokenization of their text, so these are comparable, token for token,
with the engine's own log-probs (NeMo RL's `prev_logprobs` against `generation_logprobs`).
"""

import torch
import torch.nn.functional as F

from nemo_gym.experience.grpo.batch import flatten_completion
from nemo_gym.experience.interfaces import LLMMessageLogType


def sequence_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, lengths: torch.Tensor,
                      first_position: int = 1) -> torch.Tensor:
    """(B, L) log-probs of right-padded `input_ids` (B, L) whose row i has `lengths[i]` real tokens.

    Only positions from `first_position` on are scored (the rest are 0): the model's output layer then runs on
    those positions alone, which a trainer that learns only from generated tokens uses to skip the prompt's share
    of the vocabulary projection (a fifth of a small model's forward). Differentiable when gradients are enabled;
    computed in float32 whatever the model's dtype."""
    batch, width = input_ids.shape
    first_position = max(1, first_position)
    positions = torch.arange(width, device=input_ids.device)
    attention_mask = (positions.unsqueeze(0) < lengths.to(input_ids.device).unsqueeze(1)).long()
    # The logits at position t - 1 score token t: keep positions first_position - 1 .. width - 1, drop the last.
    kept = width - first_position + 1
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=kept).logits[:, :-1].float()
    targets = input_ids[:, first_position:]
    # cross_entropy = -log_softmax gathered at the target, without materializing a second (B, L, V) tensor.
    next_token = -F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                  reduction="none").view(batch, width - first_position)
    next_token = next_token * attention_mask[:, first_position:]
    return torch.cat([torch.zeros(batch, first_position, device=next_token.device), next_token], dim=1)


@torch.no_grad()
def completion_logprobs(model: torch.nn.Module, message_log: LLMMessageLogType) -> tuple[torch.Tensor, torch.Tensor]:
    """(trainer log-probs, generation log-probs) of one completion's generated tokens, each (generated tokens,)."""
    flat = flatten_completion(message_log)
    device = next(model.parameters()).device
    ids = flat.token_ids.unsqueeze(0).to(device)
    train = sequence_logprobs(model, ids, torch.tensor([ids.shape[1]], device=device))[0].cpu()
    generated = flat.mask.bool()
    return train[generated], flat.generation_logprobs[generated]
