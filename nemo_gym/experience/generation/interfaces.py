"""The contract between rollouts and a generation backend (NeMo RL's GenerationInterface).

Input: right-padded `input_ids` (B, L) with `input_lengths` (B,), optionally per-sample `stop_strings` and
`max_new_tokens`. Output: `output_ids` (B, L') = prompt + generated tokens, right-padded with the pad token;
`generation_lengths`, `unpadded_sequence_lengths` (= input length + generation length); `logprobs` (B, L') with
0.0 over the prompt and one log-prob per generated token; `truncated` (B,) True where generation stopped at a
length limit instead of an end-of-turn token or a stop string.

Length limits: a sample generates at most min(config `max_new_tokens`, its own `max_new_tokens`,
`max_seq_len` - its input length) tokens; with no room left it generates nothing and is `truncated`.

Weights: a backend serves one `weight_version` at a time; `update_weights(weights_dir, version)` loads a folder a
trainer wrote (generation/weights.py) into every replica, pausing generation around the load, and returns once every
replica serves `version` (else `WeightUpdateError`, and `weight_version` stays). The shipped backends also report, per
sample, `weight_versions`: the versions whose weights generated its tokens, two or more when an update landed while
it was generating.
"""

import os
from abc import ABC, abstractmethod
from typing import Any, AsyncIterator, NotRequired, Optional, TypedDict

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.errors import UnsupportedBackendError


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
    weight_versions: NotRequired[list[tuple[int, ...]]]  # per sample: the weight versions its tokens came from


class GenerationInterface(ABC):
    """A policy that turns token prompts into token completions."""

    supports_async: bool = False  # whether generate_async streams samples as they finish
    _weight_version: int = 0  # backends keep it current; see weight_version

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

    @property
    def weight_version(self) -> int:
        """The weight version every replica serves now: the constructor's `weight_version`, then the `version` of
        the last successful `update_weights`."""
        return self._weight_version

    def update_weights(self, weights_dir: str | os.PathLike, version: int) -> None:
        """Load the safetensors folder `weights_dir` (what `weights.write_weights` writes) into every replica; on
        return every replica serves `version`. Raises WeightUpdateError, and keeps `weight_version`, otherwise."""
        raise UnsupportedBackendError(
            f"{type(self).__name__} cannot take new weights: implement update_weights(weights_dir, version) (load "
            f"the safetensors folder nemo_gym.experience.generation.weights.write_weights writes), or generate with "
            f"VllmHttpGeneration or HFGeneration")

    def invalidate_kv_cache(self) -> bool:
        """Drop cached keys and values computed with earlier weights, so running and later generations recompute
        them with the current ones; True when every replica did."""
        raise UnsupportedBackendError(
            f"{type(self).__name__} has no invalidate_kv_cache(): implement it (drop every replica's cached keys and "
            f"values) or turn recompute_kv_cache_after_weight_updates off")

    def prepare_for_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def finish_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def shutdown(self) -> None:
        """Release what the backend holds (connections, threads, models)."""


def implements(backend: Any, method: str) -> bool:
    """Whether `backend` has `method` of its own: not at all for an object without it, and not for a
    GenerationInterface subclass that only inherits the default above, which raises UnsupportedBackendError."""
    if not callable(getattr(backend, method, None)):
        return False
    return getattr(type(backend), method, None) is not getattr(GenerationInterface, method, None)
