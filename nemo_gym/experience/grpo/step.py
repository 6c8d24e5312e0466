"""One GRPO optimizer step on a training batch: micro-batched forward/backward, then one optimizer step.

The trainer's log-probs of the batch's own token ids are computed in the same forward pass as the loss; before the
step they measure how well training and generation agree (`token_mult_prob_error`, against the engine's
log-probs). As the old policy of the ratio the step uses the generation log-probs (the policy that actually
sampled the tokens), so the clip also bounds how far an off-policy (older) completion can move the new policy.
"""

from dataclasses import dataclass
from typing import Optional

import torch

from nemo_gym.experience.grpo.batch import TrainingBatch
from nemo_gym.experience.grpo.logprobs import sequence_logprobs
from nemo_gym.experience.grpo.loss import CLIP_EPS, clipped_pg_loss, masked_mean


@dataclass(frozen=True)
class StepMetrics:
    loss: float
    token_mult_prob_error: float
    probs_ratio: float
    clipped_fraction: float
    grad_norm: float
    generated_tokens: int


def grpo_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: TrainingBatch,
              micro_batch_size: int, clip_eps: float = CLIP_EPS,
              max_grad_norm: Optional[float] = 1.0) -> StepMetrics:
    """Accumulate the clipped loss over micro-batches of `micro_batch_size` sequences (each normalized by the
    whole batch's generated-token count, so the sum is the batch's token-level mean), clip the gradient norm,
    step. Metrics are token-weighted over the whole batch."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
    tokens = batch.num_generated_tokens
    if tokens == 0:
        raise ValueError("the batch has no generated tokens to train on")
    device = next(model.parameters()).device
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_sum = error_sum = ratio_sum = clipped_sum = 0.0
    for start in range(0, len(batch.lengths), micro_batch_size):
        micro = batch.rows(start, start + micro_batch_size)
        mask = micro.mask.to(device)
        generation = micro.generation_logprobs.to(device)
        logprobs = sequence_logprobs(model, micro.input_ids.to(device), micro.lengths.to(device))
        result = clipped_pg_loss(logprobs, generation, micro.advantages.to(device), mask, clip_eps, num_tokens=tokens)
        result.loss.backward()
        with torch.no_grad():
            error_sum += float(masked_mean(torch.exp((logprobs - generation).abs() * mask), mask, tokens))
        loss_sum += float(result.loss.detach())
        ratio_sum += result.probs_ratio
        clipped_sum += result.clipped_fraction
    parameters = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm if max_grad_norm is not None else float("inf"))
    optimizer.step()
    model.eval()
    return StepMetrics(loss_sum, error_sum, ratio_sum, clipped_sum, float(norm), tokens)
