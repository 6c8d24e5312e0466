"""GRPO trainer math on hand-computed numbers: group advantages, the clipped token-level loss (clipping both ways,
masking, global normalization), token_mult_prob_error, batch flattening, the trainer's log-probs, and a step in
micro-batches."""

import math
from types import SimpleNamespace

import pytest
import torch

from nemo_gym.experience.errors import TokenAlignmentError
from nemo_gym.experience.grpo import (
    clipped_pg_loss,
    group_advantages,
    grpo_step,
    sequence_logprobs,
    token_mult_prob_error,
    training_batch,
)
from nemo_gym.experience.grpo.batch import TrainingBatch, flatten_completion
from nemo_gym.experience.interfaces import Completion, PromptGroupRecord

LOG = math.log


def test_group_advantages_normalize_each_group_by_its_own_mean_and_std() -> None:
    advantages = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]]))
    # mean 0.5, population std 0.5
    assert advantages[0].tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    # no spread, no signal
    assert advantages[1].tolist() == [0.0, 0.0, 0.0, 0.0]
    # mean 0.25, std sqrt(0.25 * 0.75) = 0.4330
    assert advantages[2].tolist() == pytest.approx([0.75 / 0.4330127, -0.25 / 0.4330127, -0.25 / 0.4330127,
                                                    -0.25 / 0.4330127], abs=1e-4)


def test_group_advantages_refuse_a_flat_vector() -> None:
    with pytest.raises(ValueError, match="groups, completions per group"):
        group_advantages(torch.tensor([1.0, 0.0]))


def _row(*values: float) -> torch.Tensor:
    return torch.tensor([list(values)], dtype=torch.float32)


MASK = _row(0, 1, 1, 0)
# Position 3 is masked and wildly off: it must change nothing (no NaN, no gradient, no share of the mean).
OLD = _row(0.0, LOG(0.25), LOG(0.3), -50.0)


def test_positive_advantage_clips_a_ratio_above_one_plus_eps() -> None:
    new = _row(0.0, LOG(0.5), LOG(0.3), 50.0).requires_grad_()
    result = clipped_pg_loss(new, OLD, torch.tensor([1.0]), MASK)
    # token 1: ratio 2 -> max(-2, -1.2) = -1.2 (clipped); token 2: ratio 1 -> -1; mean over 2 tokens
    assert result.loss.item() == pytest.approx(-1.1, abs=1e-6)
    assert result.probs_ratio == pytest.approx(1.5, abs=1e-6)
    assert result.clipped_fraction == pytest.approx(0.5)
    result.loss.backward()
    # the clipped token gets no gradient; the unclipped one gets -A * ratio / 2 tokens; masked ones none
    assert new.grad[0].tolist() == pytest.approx([0.0, 0.0, -0.5, 0.0], abs=1e-6)


def test_negative_advantage_keeps_a_large_ratio_unclipped() -> None:
    new = _row(0.0, LOG(0.5), LOG(0.3), 50.0)
    result = clipped_pg_loss(new, OLD, torch.tensor([-1.0]), MASK)
    # token 1: max(2, 1.2) = 2 (pessimistic: unclipped); token 2: 1
    assert result.loss.item() == pytest.approx(1.5, abs=1e-6)
    assert result.clipped_fraction == 0.0


def test_a_ratio_below_one_minus_eps_is_clipped_for_a_negative_advantage_only() -> None:
    new = _row(0.0, LOG(0.125), LOG(0.3), 0.0)  # token 1: ratio 0.5
    negative = clipped_pg_loss(new, OLD, torch.tensor([-1.0]), MASK)
    assert negative.loss.item() == pytest.approx((0.8 + 1.0) / 2, abs=1e-6)  # max(0.5, 0.8)
    assert negative.clipped_fraction == pytest.approx(0.5)
    positive = clipped_pg_loss(new, OLD, torch.tensor([1.0]), MASK)
    assert positive.loss.item() == pytest.approx((-0.5 - 1.0) / 2, abs=1e-6)  # max(-0.5, -0.8)
    assert positive.clipped_fraction == 0.0


def test_loss_is_a_token_level_mean_over_the_whole_batch_or_a_global_count() -> None:
    new = torch.tensor([[0.0, LOG(0.5), 0.0], [0.0, LOG(0.3), LOG(0.3)]])
    old = torch.tensor([[0.0, LOG(0.5), 0.0], [0.0, LOG(0.3), LOG(0.3)]])
    mask = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    advantages = torch.tensor([3.0, -1.0])
    # ratios all 1: per-token losses -3 (one token), +1, +1 -> mean over 3 tokens, not a mean of sequence means
    assert clipped_pg_loss(new, old, advantages, mask).loss.item() == pytest.approx(-1 / 3, abs=1e-6)
    # a micro-batch of a larger batch divides by the batch's token count
    assert clipped_pg_loss(new, old, advantages, mask, num_tokens=6).loss.item() == pytest.approx(-1 / 6, abs=1e-6)


def test_token_mult_prob_error_averages_exp_abs_difference_over_generated_tokens() -> None:
    train = _row(0.0, LOG(0.5), LOG(0.4), 10.0)
    generation = _row(0.0, LOG(0.25), LOG(0.4), -10.0)
    # exp|log 2| = 2 and exp 0 = 1 over the two generated tokens; the masked position is ignored
    assert token_mult_prob_error(train, generation, MASK) == pytest.approx(1.5, abs=1e-6)
    assert token_mult_prob_error(generation, generation, MASK) == pytest.approx(1.0, abs=1e-6)


def _message(role: str, ids: list[int], logprobs: list[float] | None = None) -> dict:
    message = {"role": role, "content": "", "token_ids": torch.tensor(ids)}
    if logprobs is not None:
        message["generation_logprobs"] = torch.tensor(logprobs)
    return message


def _group(rewards: list[float], logs: list[list[dict]]) -> PromptGroupRecord:
    completions = [Completion(log, None, False, r) for r, log in zip(rewards, logs)]
    return PromptGroupRecord(0, [], None, {"task_name": "t"}, completions)


MULTI_TURN = [_message("user", [1, 2, 3]), _message("assistant", [4, 5], [-0.1, -0.2]), _message("user", [6]),
              _message("assistant", [7], [-0.3])]


def test_a_multi_turn_completion_flattens_to_its_ids_with_assistant_tokens_masked_in() -> None:
    flat = flatten_completion(MULTI_TURN)
    assert flat.token_ids.tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert flat.mask.tolist() == [0, 0, 0, 1, 1, 0, 1]
    assert flat.generation_logprobs.tolist() == pytest.approx([0, 0, 0, -0.1, -0.2, 0, -0.3])


def test_an_assistant_message_without_a_logprob_per_token_is_refused() -> None:
    with pytest.raises(TokenAlignmentError, match="2 token ids but 1 generation log-probs"):
        flatten_completion([_message("user", [1]), _message("assistant", [4, 5], [-0.1])])
    with pytest.raises(TokenAlignmentError, match="no generation log-probs"):
        flatten_completion([_message("user", [1]), _message("assistant", [4, 5])])


def test_training_batch_pads_right_and_gives_each_completion_its_group_advantage() -> None:
    short = [_message("user", [1]), _message("assistant", [9], [-0.5])]
    batch = training_batch([_group([1.0, 0.0], [MULTI_TURN, short])], pad_token_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7], [1, 9, 0, 0, 0, 0, 0]]
    assert batch.lengths.tolist() == [7, 2]
    assert batch.mask[1].tolist() == [0, 1, 0, 0, 0, 0, 0]
    assert batch.advantages.tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    assert batch.num_generated_tokens == 4
    micro = batch.rows(1, 2)
    assert micro.input_ids.tolist() == [[1, 9]] and micro.generation_logprobs.tolist() == [[0.0, -0.5]]


# A bigram "model": the logits at position t depend only on token t (row of TABLE), so the log-prob of each next
# token is known by hand.
TABLE = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]))


def _kept(logits: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
    """A transformers causal LM's `logits_to_keep`: the last N positions, 0 for all."""
    return logits[:, -logits_to_keep:] if logits_to_keep else logits


class Bigram(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int = 0) -> SimpleNamespace:
        return SimpleNamespace(logits=_kept(TABLE[input_ids], logits_to_keep))


def test_sequence_logprobs_score_each_token_given_the_previous_ones_and_zero_the_rest() -> None:
    ids = torch.tensor([[0, 1, 1, 2], [2, 0, 0, 0]])  # the second row has 2 real tokens, then padding
    logprobs = sequence_logprobs(Bigram(), ids, torch.tensor([4, 2]))
    assert logprobs[0].tolist() == pytest.approx([0.0, LOG(0.25), LOG(0.8), LOG(0.1)], abs=1e-6)
    assert logprobs[1].tolist() == pytest.approx([0.0, LOG(0.2), 0.0, 0.0], abs=1e-6)


class LearnableBigram(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(TABLE.clone())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int = 0) -> SimpleNamespace:
        return SimpleNamespace(logits=_kept(self.table[input_ids], logits_to_keep))


def _bigram_batch() -> TrainingBatch:
    def log(ids: list[int], generated: list[float]) -> list[dict]:
        return [_message("user", ids[:1]), _message("assistant", ids[1:], generated)]

    # generation log-probs = the table's own: the trainer and the "engine" agree exactly before the step
    group = _group([1.0, 0.0, 0.0], [log([0, 1, 1], [LOG(0.25), LOG(0.8)]), log([2, 2], [LOG(0.6)]),
                                     log([1, 0, 2, 2], [LOG(0.1), LOG(0.25), LOG(0.6)])])
    return training_batch([group], pad_token_id=0)


@pytest.mark.parametrize("micro_batch_size", [1, 2])
def test_a_step_in_micro_batches_equals_one_step_on_the_whole_batch(micro_batch_size: int) -> None:
    models, metrics = [], []
    for size in (3, micro_batch_size):
        model = LearnableBigram()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        metrics.append(grpo_step(model, optimizer, _bigram_batch(), size, max_grad_norm=None))
        models.append(model)
    assert torch.allclose(models[0].table, models[1].table, atol=1e-6)
    assert not torch.allclose(models[0].table, TABLE)  # the step moved the policy
    whole, micro = metrics
    assert micro.loss == pytest.approx(whole.loss, abs=1e-6) and micro.generated_tokens == whole.generated_tokens == 6
    assert whole.token_mult_prob_error == pytest.approx(1.0, abs=1e-6) and whole.probs_ratio == pytest.approx(1.0)


def test_sequence_logprobs_from_a_first_position_score_the_same_and_zero_what_is_before() -> None:
    ids = torch.tensor([[0, 1, 1, 2], [2, 0, 0, 0]])
    whole = sequence_logprobs(Bigram(), ids, torch.tensor([4, 3]))
    tail = sequence_logprobs(Bigram(), ids, torch.tensor([4, 3]), first_position=2)
    assert torch.allclose(tail[:, 2:], whole[:, 2:], atol=1e-7) and whole[0, 2:].abs().min() > 0.1
    assert torch.equal(tail[:, :2], torch.zeros(2, 2))


def _two_group_batch(second_group_rewards: list[float]) -> TrainingBatch:
    def log(ids: list[int], generated: list[float]) -> list[dict]:
        return [_message("user", ids[:1]), _message("assistant", ids[1:], generated)]

    flat = _group([1.0, 0.0, 0.0], [log([0, 1, 1], [LOG(0.25), LOG(0.8)]), log([2, 2], [LOG(0.6)]),
                                    log([1, 0, 2, 2], [LOG(0.1), LOG(0.25), LOG(0.6)])])
    same = _group(second_group_rewards, [log([0, 0, 1], [LOG(0.5), LOG(0.25)]), log([1, 1], [LOG(0.8)]),
                                         log([2, 1, 1], [LOG(0.2), LOG(0.8)])])
    return training_batch([flat, same], pad_token_id=0)


def test_completions_without_signal_are_not_run_and_the_step_is_the_whole_batch_step() -> None:
    batch = _two_group_batch([1.0, 1.0, 1.0])  # the second group's advantages are all 0
    by_hand = LearnableBigram()
    logprobs = sequence_logprobs(by_hand, batch.input_ids, batch.lengths)
    clipped_pg_loss(logprobs, batch.generation_logprobs, batch.advantages, batch.mask).loss.backward()
    torch.optim.SGD(by_hand.parameters(), lr=0.1).step()

    model, seen = LearnableBigram(), []
    model.register_forward_hook(lambda module, args, kwargs, out: seen.append(kwargs["input_ids"].shape[0]),
                                with_kwargs=True)
    metrics = grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.1), batch, 2, max_grad_norm=None)
    assert sum(seen) == 3  # the first group's three completions only
    assert torch.allclose(model.table, by_hand.table, atol=1e-6)
    assert metrics.generated_tokens == 11 and metrics.token_mult_prob_error == pytest.approx(1.0, abs=1e-6)


def test_a_batch_without_any_signal_moves_nothing_and_still_measures_agreement() -> None:
    model = LearnableBigram()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    metrics = grpo_step(model, optimizer, _two_group_batch([0.0, 0.0, 0.0]).select(torch.tensor([3, 4, 5])), 2)
    assert torch.equal(model.table, TABLE) and model.table.grad is None
    assert metrics.grad_norm == 0.0 and metrics.loss == 0.0
    assert metrics.token_mult_prob_error == pytest.approx(1.0, abs=1e-6) and metrics.generated_tokens == 5


def test_a_micro_batch_whose_completions_generated_nothing_adds_nothing_and_does_not_fail() -> None:
    def log(ids: list[int], generated: list[float]) -> list[dict]:
        return [_message("user", ids[:1]), _message("assistant", ids[1:], generated)]

    # the second completion's turn produced no token (no room left, say), yet its group's rewards differ
    batch = training_batch([_group([1.0, 0.0], [log([0, 1, 1], [LOG(0.25), LOG(0.8)]), log([2], [])])], pad_token_id=0)
    whole, micro = LearnableBigram(), LearnableBigram()
    grpo_step(whole, torch.optim.SGD(whole.parameters(), lr=0.1), batch, 2, max_grad_norm=None)
    metrics = grpo_step(micro, torch.optim.SGD(micro.parameters(), lr=0.1), batch, 1, max_grad_norm=None)
    assert torch.allclose(micro.table, whole.table, atol=1e-6) and not torch.allclose(micro.table, TABLE)
    assert metrics.generated_tokens == 2 and metrics.token_mult_prob_error == pytest.approx(1.0, abs=1e-6)
