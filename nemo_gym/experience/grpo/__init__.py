"""The math of a GRPO trainer on the experience layer's data, with NeMo RL's definitions.

- `advantages`: group-normalized advantages, (reward - group mean) / (group std + eps), one per completion;
- `batch`: prompt groups as right-padded token tensors with the generated-token mask and vLLM's log-probs;
- `logprobs`: the trainer's log-probs of those exact token ids under a transformers causal LM;
- `loss`: NeMo RL's clipped token-level policy-gradient loss, its truncated importance-sampling correction and its
  `token_mult_prob_error`;
- `step`: one micro-batched optimizer step on a batch, with those metrics.

examples/grpo/train.py is a whole trainer built from these.
"""

from nemo_gym.experience.grpo.advantages import group_advantages
from nemo_gym.experience.grpo.batch import TrainingBatch, training_batch
from nemo_gym.experience.grpo.logprobs import completion_logprobs, sequence_logprobs
from nemo_gym.experience.grpo.loss import (
    ClippedPGLoss,
    ImportanceWeights,
    clipped_pg_loss,
    masked_mean,
    token_mult_prob_error,
    truncated_importance_weights,
)
from nemo_gym.experience.grpo.step import StepMetrics, grpo_step

__all__ = [
    "ClippedPGLoss",
    "ImportanceWeights",
    "StepMetrics",
    "TrainingBatch",
    "clipped_pg_loss",
    "completion_logprobs",
    "group_advantages",
    "grpo_step",
    "masked_mean",
    "sequence_logprobs",
    "token_mult_prob_error",
    "training_batch",
    "truncated_importance_weights",
]
