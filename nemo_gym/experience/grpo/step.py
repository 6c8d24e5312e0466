"""One GRPO optimizer step on a training batch: micro-batched forward/backward, then one optimizer step.

The trainer's log-probs of the batch's own token ids are computed in the same forward pass as the loss; they measure
how well training and generation agree (`token_mult_prob_error`, against the engine's log-probs).

Without correction the old policy of the ratio is the generation log-probs (the policy that actually sampled the
tokens), so the clip bounds how far an off-policy completion can move the new policy; but every token the generator
scores more than `clip_eps` away from the trainer (an older weight version, or bf16 rounding) is then clipped and
teaches nothing. With `truncated_importance_sampling_ratio` set (NeMo RL's importance-sampling correction) the old
policy is the trainer's own log-probs before the step, and each token's term is weighted by
min(p_trainer / p_generation, ratio) instead: every token teaches, in proportion to how likely the trainer's policy
was to sample it.

A completion whose advantage is 0 (every completion of a group scored alike) adds exactly nothing to the loss or its
gradient, so it is not run at all: the step's gradient is the same, at the cost of the completions that carry
signal only (early in training most groups score all 0).
"""

from dataclasses import dataclass
from typing import Optional

import torch

from nemo_gym.experience.grpo.batch import TrainingBatch
from nemo_gym.experience.grpo.logprobs import sequence_logprobs
from nemo_gym.experience.grpo.loss import CLIP_EPS, clipped_pg_loss, masked_mean, truncated_importance_weights


@dataclass(frozen=True)
class StepMetrics:
    loss: float
    token_mult_prob_error: float
    probs_ratio: float
    clipped_fraction: float
    grad_norm: float
    generated_tokens: int
    importance_weight_mean: float  # mean p_trainer / p_generation over the tokens trained on (truncated when on)
    importance_truncated_fraction: float  # share of those tokens whose weight hit the cap (0 with no correction)


def grpo_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: TrainingBatch,
              micro_batch_size: int, *, clip_eps: float = CLIP_EPS, max_grad_norm: Optional[float] = 1.0,
              truncated_importance_sampling_ratio: Optional[float] = None) -> StepMetrics:
    """Accumulate the clipped loss over micro-batches of `micro_batch_size` sequences (each normalized by the
    whole batch's generated-token count, so the sum is the batch's token-level mean), clip the gradient norm,
    step. The loss is the whole batch's; the other metrics are token-weighted over the completions trained on (every
    completion, without a gradient and with no optimizer step, when no advantage is nonzero)."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
    tokens = batch.num_generated_tokens
    if tokens == 0:
        raise ValueError("the batch has no generated tokens to train on")
    signal = batch.advantages != 0
    learns = bool(signal.any())
    trained = batch.select(signal.nonzero().flatten() if learns else torch.arange(len(batch.lengths)))
    trained_tokens = trained.num_generated_tokens
    device = next(model.parameters()).device
    model.train()
    optimizer.zero_grad(set_to_none=True)
    cap = truncated_importance_sampling_ratio
    loss_sum = error_sum = ratio_sum = clipped_sum = weight_sum = truncated_sum = 0.0
    with torch.set_grad_enabled(learns):
        for start in range(0, len(trained.lengths), micro_batch_size):
            micro = trained.rows(start, start + micro_batch_size)
            mask = micro.mask.to(device)
            generation = micro.generation_logprobs.to(device)
            logprobs = sequence_logprobs(model, micro.input_ids.to(device), micro.lengths.to(device),
                                         first_position=micro.first_generated_position)
            importance = truncated_importance_weights(logprobs.detach(), generation, mask,
                                                      cap if cap is not None else float("inf"), trained_tokens)
            old = generation if cap is None else logprobs.detach()
            result = clipped_pg_loss(logprobs, old, micro.advantages.to(device), mask, clip_eps, num_tokens=tokens,
                                     importance_weights=importance.weights if cap is not None else None)
            if learns:
                result.loss.backward()
            with torch.no_grad():
                error_sum += float(masked_mean(torch.exp((logprobs - generation).abs() * mask), mask, trained_tokens))
            loss_sum += float(result.loss.detach())
            # clipped_pg_loss normalized these by the whole batch's tokens: reweight to the trained tokens' mean
            ratio_sum += result.probs_ratio * tokens / trained_tokens
            clipped_sum += result.clipped_fraction * tokens / trained_tokens
            weight_sum += importance.mean
            truncated_sum += importance.truncated_fraction
    model.eval()
    norm = 0.0
    if learns:
        parameters = [p for p in model.parameters() if p.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(
            parameters, max_grad_norm if max_grad_norm is not None else float("inf")))
        optimizer.step()
    return StepMetrics(loss=loss_sum, token_mult_prob_error=error_sum, probs_ratio=ratio_sum,
                       clipped_fraction=clipped_sum, grad_norm=norm, generated_tokens=tokens,
                       importance_weight_mean=weight_sum, importance_truncated_fraction=truncated_sum)
