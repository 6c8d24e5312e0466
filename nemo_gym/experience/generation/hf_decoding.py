"""Batched token-by-token decoding of a Hugging Face causal LM with per-sample limits and stop conditions.

Our own loop rather than `model.generate`: we need the raw log-prob of each chosen token (`generate` exposes raw
logits only by keeping every step's full-vocabulary logits in memory), a different length cap and stop-string set
per sample in one batch, and each sample handed over the moment it finishes.

Log-probs are `log_softmax` of the raw logits, before temperature, top-k and top-p: what vLLM returns by default
(its "raw_logprobs" mode), so the two backends report the same quantity for the same model.
"""

import threading
from typing import Any, Callable, Optional, Sequence

import torch

from nemo_gym.experience.generation.samples import GeneratedSample, SampleRequest
from nemo_gym.experience.generation.settings import Sampling

# Tokens decoded when looking for a stop string: every token decodes to at least one character except the pieces
# of a multi-byte character, so a stop string of n characters lies within its last n + slack tokens.
_STOP_WINDOW_SLACK = 8


def choose_tokens(logits: torch.Tensor, sampling: Sampling, generator: Optional[torch.Generator]) -> torch.Tensor:
    """One token per row of `logits` (B, V): temperature, then top-k, then top-p, then a draw (vLLM's order)."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    scores = logits / sampling.temperature
    if sampling.top_k is not None and 0 < sampling.top_k < scores.shape[-1]:
        kth_best = scores.topk(sampling.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth_best, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already hold top_p of the mass; the best one always stays.
        drop = probs.cumsum(dim=-1) - probs > sampling.top_p
        scores = scores.scatter(-1, order, sorted_scores.masked_fill(drop, float("-inf")))
    return torch.multinomial(scores.softmax(dim=-1), num_samples=1, generator=generator).squeeze(-1)


class _SampleProgress:
    """One sample's tokens so far and whether an end-of-turn token, a stop string or its length cap ended it."""

    def __init__(self, request: SampleRequest) -> None:
        self.request = request
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.window = max((len(s) for s in request.stop_strings), default=0) + _STOP_WINDOW_SLACK

    def add(self, token_id: int, logprob: float, eos_ids: frozenset[int], tokenizer: Any) -> Optional[GeneratedSample]:
        """Record one token; return the finished sample if it ends here."""
        self.token_ids.append(token_id)
        self.logprobs.append(logprob)
        if token_id in eos_ids or self._ends_in_stop_string(tokenizer):
            return GeneratedSample(self.token_ids, self.logprobs, truncated=False)
        if len(self.token_ids) >= self.request.max_new_tokens:
            return GeneratedSample(self.token_ids, self.logprobs, truncated=True)
        return None

    def _ends_in_stop_string(self, tokenizer: Any) -> bool:
        if not self.request.stop_strings:
            return False
        # Checked after every token, so a match must involve the newest one: the sample ends there (inclusive).
        tail = tokenizer.decode(self.token_ids[-self.window:], skip_special_tokens=True)
        return any(stop in tail for stop in self.request.stop_strings)


def _left_padded(requests: Sequence[SampleRequest], pad_token_id: int,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r.prompt_ids) for r in requests)
    input_ids = torch.full((len(requests), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(requests), width), dtype=torch.long)
    for row, request in enumerate(requests):
        input_ids[row, width - len(request.prompt_ids):] = torch.tensor(request.prompt_ids)
        attention_mask[row, width - len(request.prompt_ids):] = 1
    return input_ids.to(device), attention_mask.to(device)


@torch.inference_mode()
def decode_batch(
    model: Any,
    tokenizer: Any,
    requests: Sequence[SampleRequest],
    *,
    sampling: Sampling,
    eos_ids: frozenset[int],
    pad_token_id: int,
    on_finished: Callable[[SampleRequest, GeneratedSample], None],
    cancelled: Optional[threading.Event] = None,
    generator: Optional[torch.Generator] = None,
) -> None:
    """Generate for every request (each with max_new_tokens >= 1), calling `on_finished`
    once per sample as soon as it ends. Stops early, without finishing the rest, once `cancelled` is set."""
    device = model.device
    input_ids, attention_mask = _left_padded(requests, pad_token_id, device)
    # Positions count real tokens only, so a left-padded prompt is positioned as if it were alone.
    position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)
    progress = [_SampleProgress(r) for r in requests]
    active = set(range(len(requests)))
    outputs = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    use_cache=True, logits_to_keep=1)
    for _ in range(max(r.max_new_tokens for r in requests)):
        logits = outputs.logits[:, -1, :].float()
        next_tokens = choose_tokens(logits, sampling, generator)
        chosen_logprobs = logits.log_softmax(dim=-1).gather(-1, next_tokens[:, None]).squeeze(-1)
        tokens, logprobs = next_tokens.tolist(), chosen_logprobs.tolist()
        for row in sorted(active):
            finished = progress[row].add(tokens[row], logprobs[row], eos_ids, tokenizer)
            if finished is not None:
                active.discard(row)
                on_finished(requests[row], finished)
        if not active or (cancelled is not None and cancelled.is_set()):
            return
        # Finished rows keep decoding padding until the batch ends; their tokens are no longer read.
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(requests), 1))], dim=-1)
        position_ids = position_ids[:, -1:] + 1
        outputs = model(input_ids=next_tokens[:, None], attention_mask=attention_mask, position_ids=position_ids,
                        past_key_values=outputs.past_key_values, use_cache=True, logits_to_keep=1)
