"""Truncated importance sampling (NeMo RL's importance-sampling correction) on hand-computed numbers: the weights,
their cap and statistics, the weighted loss and its gradient, and a step that trains on tokens an off-policy
generator sampled where the uncorrected step's clip would teach nothing."""

import math

import pytest
import torch

from nemo_gym.experience.grpo import clipped_pg_loss, grpo_step, training_batch, truncated_importance_weights
from tests.experience.test_grpo_math import TABLE, LearnableBigram, _group, _message

LOG = math.log
MASK = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.0]])
# token 1: trainer twice as likely as the generator; token 2: equal; token 3: trainer 8x as likely; position 4 is
# masked and wildly off (it must not count, overflow or become NaN)
TRAINER = torch.tensor([[0.0, LOG(0.5), LOG(0.3), LOG(0.8), 80.0]])
GENERATION = torch.tensor([[0.0, LOG(0.25), LOG(0.3), LOG(0.1), -80.0]])


def test_weights_are_the_probability_ratio_capped_and_zero_off_the_mask() -> None:
    result = truncated_importance_weights(TRAINER, GENERATION, MASK, max_ratio=2.0)
    assert result.weights[0].tolist() == pytest.approx([0.0, 2.0, 1.0, 2.0, 0.0], abs=1e-6)
    assert result.mean == pytest.approx(5 / 3, abs=1e-6)
    assert result.truncated_fraction == pytest.approx(1 / 3)  # only token 3 (ratio 8) exceeds the cap of 2
    uncapped = truncated_importance_weights(TRAINER, GENERATION, MASK, max_ratio=float("inf"))
    assert uncapped.weights[0].tolist() == pytest.approx([0.0, 2.0, 1.0, 8.0, 0.0], abs=1e-5)
    assert uncapped.truncated_fraction == 0.0


def test_a_cap_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="must be positive, got 0"):
        truncated_importance_weights(TRAINER, GENERATION, MASK, max_ratio=0.0)


def test_the_weights_scale_each_tokens_term_and_its_gradient() -> None:
    new = TRAINER.clone().requires_grad_()
    weights = truncated_importance_weights(TRAINER, GENERATION, MASK, max_ratio=2.0).weights
    # old = the trainer's own log-probs: every ratio is 1, so each token's term is -A * weight
    result = clipped_pg_loss(new, TRAINER, torch.tensor([1.0]), MASK, importance_weights=weights)
    assert result.loss.item() == pytest.approx(-(2.0 + 1.0 + 2.0) / 3, abs=1e-6)
    result.loss.backward()
    assert new.grad[0].tolist() == pytest.approx([0.0, -2 / 3, -1 / 3, -2 / 3, 0.0], abs=1e-6)


def _off_policy_batch() -> "object":
    """The bigram table's tokens, but scored by a generator whose log-probs are 0.5 nats lower on every token: an
    older or rounded generator. Uncorrected, every ratio exp(0.5) = 1.65 is outside the clip of a positive advantage."""
    def log(ids: list[int], trainer: list[float]) -> list[dict]:
        return [_message("user", ids[:1]), _message("assistant", ids[1:], [lp - 0.5 for lp in trainer])]

    group = _group([1.0, 0.0, 0.0], [log([0, 1, 1], [LOG(0.25), LOG(0.8)]), log([2, 2], [LOG(0.6)]),
                                     log([1, 0, 2, 2], [LOG(0.1), LOG(0.25), LOG(0.6)])])
    return training_batch([group], pad_token_id=0)


def test_the_correction_trains_on_tokens_the_uncorrected_clip_drops() -> None:
    # positive advantage: the clip zeroes its gradient when the ratio is above 1 + eps
    plain, corrected = LearnableBigram(), LearnableBigram()
    without = grpo_step(plain, torch.optim.SGD(plain.parameters(), lr=0.1), _off_policy_batch(), 3,
                        max_grad_norm=None)
    with_correction = grpo_step(corrected, torch.optim.SGD(corrected.parameters(), lr=0.1), _off_policy_batch(), 3,
                                max_grad_norm=None, truncated_importance_sampling_ratio=2.0)
    assert without.clipped_fraction == pytest.approx(2 / 6) and with_correction.clipped_fraction == 0.0
    # exp(0.5) = 1.6487 on every token, below the cap: measured both ways, truncated neither way
    assert without.importance_weight_mean == pytest.approx(math.exp(0.5), abs=1e-4)
    assert with_correction.importance_weight_mean == pytest.approx(math.exp(0.5), abs=1e-4)
    assert with_correction.importance_truncated_fraction == 0.0
    # The negative completions' terms are the same both ways (unclipped, weight exp(0.5)); the positive completion's
    # tokens (1 after 0, 1 after 1) add their push only with the correction.
    for row, token in ((0, 1), (1, 1)):
        assert corrected.table[row, token] - TABLE[row, token] > plain.table[row, token] - TABLE[row, token] + 0.005


def test_with_a_generator_that_agrees_the_correction_changes_nothing() -> None:
    from tests.experience.test_grpo_math import _bigram_batch

    plain, corrected = LearnableBigram(), LearnableBigram()
    grpo_step(plain, torch.optim.SGD(plain.parameters(), lr=0.1), _bigram_batch(), 2, max_grad_norm=None)
    metrics = grpo_step(corrected, torch.optim.SGD(corrected.parameters(), lr=0.1), _bigram_batch(), 2,
                        max_grad_norm=None, truncated_importance_sampling_ratio=2.0)
    assert torch.allclose(plain.table, corrected.table, atol=1e-6)
    assert metrics.importance_weight_mean == pytest.approx(1.0, abs=1e-6)
