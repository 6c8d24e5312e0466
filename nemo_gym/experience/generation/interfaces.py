"""The contract between rollouts and a generation backend (NeMo RL's GenerationInterface).

Input: right-padded `input_ids` (B, L) with `input_lengths` (B,), optionally per-sample `stop_strings` and
`max_new_tokens`. Output: `output_ids` (B, L') = prompt + generated tokens, right-padded with the pad token;
`generation_lengths`, `unpadded_sequence_lengths` (= input length + generation length); `logprobs` (B, L') with
0.0 over the prompt and one log-prob per generated token; `truncated` (B,) True where generation stopped at a
length limit instead of an end-of-turn token or a stop string.

Length limits: a sample generates at most min(config `max_new_tokens`, its own `max_new_tokens`,
`max_seq_len` - its input length) tokens; with no room left it generates nothing and is `truncated`.
"""

from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, NotRequired, Optional, TypedDict

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict


class GenerationConfig(TypedDict, total=False):
    backend: str
    model_name: str
    max_new_tokens: int
    max_seq_len: int  # prompt + generation never exceed this
    temperature: float
    top_p: float
    top_k: Optional[int]
    stop_token_ids: Optional[list[int]]  # end-of-turn ids besides the tokenizer's eos
    stop_strings: Optional[list[str]]  # for every sample, besides its own
    pad_token_id: int


class GenerationDatumSpec(TypedDict):
    input_ids: torch.Tensor
    input_lengths: torch.Tensor
    stop_strings: NotRequired[list[Optional[list[str]]]]
    max_new_tokens: NotRequired[torch.Tensor]  # per-sample cap, e.g. the room left under a rollout's max_seq_len


class GenerationOutputSpec(TypedDict):
    output_ids: torch.Tensor
    generation_lengths: torch.Tensor
    unpadded_sequence_lengths: torch.Tensor
    logprobs: torch.Tensor
    truncated: torch.Tensor


class GenerationInterface(ABC):
    """A policy that turns token prompts into token completions."""

    supports_async: bool = False  # whether generate_async streams samples as they finish

    @abstractmethod
    def generate(self, data: BatchedDataDict[GenerationDatumSpec],
                 greedy: bool = False) -> BatchedDataDict[GenerationOutputSpec]:
        """Generate for the whole batch and return when every sample is done."""

    async def generate_async(
        self, data: BatchedDataDict[GenerationDatumSpec], greedy: bool = False
    ) -> AsyncIterator[tuple[int, BatchedDataDict[GenerationOutputSpec]]]:
        """Yield (index in `data`, a batch of one output) for each sample as soon as it finishes."""
        raise NotImplementedError(f"{type(self).__name__} has no asynchronous generation")
        yield  # pragma: no cover - makes this an async generator

    @property
    @abstractmethod
    def pad_token_id(self) -> int:
        """The id that pads `output_ids`."""

    def prepare_for_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def finish_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def shutdown(self) -> None:
        """Release what the backend holds (connections, threads, models)."""
