"""What each sample of a generation batch asks for, and how finished samples become the output batch.

Every backend goes through these so that length limits, stop strings, `truncated` and padding mean the same thing
whichever backend produced them (generation/interfaces.py states the contract).
"""

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.generation.interfaces import GenerationConfig, GenerationDatumSpec, GenerationOutputSpec


@dataclass(frozen=True)
class SampleRequest:
    """One sample to generate for: its unpadded prompt, how many tokens it may add, and its stop strings."""

    index: int  # row in the input batch
    prompt_ids: list[int]
    max_new_tokens: int  # already clamped; 0 means there is no room and nothing is generated
    stop_strings: list[str]


@dataclass(frozen=True)
class GeneratedSample:
    """What a backend produced for one sample: the new tokens, one log-prob each, whether a length limit hit, and
    the weight versions the tokens were generated on (none when there are no tokens)."""

    token_ids: list[int]
    logprobs: list[float]
    truncated: bool
    weight_versions: tuple[int, ...] = ()


NO_ROOM = GeneratedSample([], [], truncated=True)


def require_config(config: GenerationConfig, keys: Sequence[str], backend: str) -> None:
    missing = [key for key in keys if config.get(key) is None]
    if missing:
        raise ValueError(f"{backend}: GenerationConfig lacks {', '.join(missing)}")


def clamp_max_new_tokens(config_max: int, sample_max: Optional[int], max_seq_len: int, input_length: int) -> int:
    """The tokens a sample may add: the tightest of the config's cap, its own cap and the room under max_seq_len."""
    room = min(config_max, max_seq_len - input_length)
    if sample_max is not None:
        room = min(room, sample_max)
    return max(room, 0)


def merge_stop_strings(common: Optional[Sequence[str]], own: Optional[Sequence[str]]) -> list[str]:
    """The config's stop strings followed by the sample's own, without repeats."""
    return list(dict.fromkeys([*(common or ()), *(own or ())]))


def sample_requests(data: BatchedDataDict[GenerationDatumSpec], config: GenerationConfig) -> list[SampleRequest]:
    """One request per row of `data`, with its length limit and stop strings resolved."""
    input_ids, input_lengths = data["input_ids"], data["input_lengths"]
    if input_ids.dim() != 2 or input_lengths.shape != (input_ids.shape[0],):
        raise ValueError(f"input_ids must be (B, L) and input_lengths (B,); got {tuple(input_ids.shape)} and "
                         f"{tuple(input_lengths.shape)}")
    per_sample_stops = data.get("stop_strings") or [None] * input_ids.shape[0]
    per_sample_max = data.get("max_new_tokens")
    requests = []
    for i in range(input_ids.shape[0]):
        length = int(input_lengths[i])
        if not 1 <= length <= input_ids.shape[1]:
            raise ValueError(f"sample {i}: input length {length} outside 1..{input_ids.shape[1]}")
        requests.append(SampleRequest(
            index=i,
            prompt_ids=input_ids[i, :length].tolist(),
            max_new_tokens=clamp_max_new_tokens(
                config["max_new_tokens"],
                int(per_sample_max[i]) if per_sample_max is not None else None,
                config["max_seq_len"],
                length,
            ),
            stop_strings=merge_stop_strings(config.get("stop_strings"), per_sample_stops[i]),
        ))
    return requests


def pack_outputs(requests: Sequence[SampleRequest], results: Sequence[GeneratedSample], pad_token_id: int,
                 min_width: int = 0) -> BatchedDataDict[GenerationOutputSpec]:
    """Rows of prompt + generated tokens, right-padded with `pad_token_id` to at least `min_width` (the input's
    padded width, so outputs are never narrower than inputs); log-probs are 0.0 over prompts and padding."""
    total = [len(r.prompt_ids) + len(g.token_ids) for r, g in zip(requests, results, strict=True)]
    width = max([min_width, *total])
    output_ids = torch.full((len(requests), width), pad_token_id, dtype=torch.long)
    logprobs = torch.zeros((len(requests), width), dtype=torch.float32)
    for row, (request, generated) in enumerate(zip(requests, results)):
        start = len(request.prompt_ids)
        output_ids[row, :start] = torch.tensor(request.prompt_ids, dtype=torch.long)
        output_ids[row, start:total[row]] = torch.tensor(generated.token_ids, dtype=torch.long)
        logprobs[row, start:total[row]] = torch.tensor(generated.logprobs, dtype=torch.float32)
    return BatchedDataDict(
        output_ids=output_ids,
        logprobs=logprobs,
        generation_lengths=torch.tensor([len(g.token_ids) for g in results], dtype=torch.long),
        unpadded_sequence_lengths=torch.tensor(total, dtype=torch.long),
        truncated=torch.tensor([g.truncated for g in results], dtype=torch.bool),
        weight_versions=[g.weight_versions for g in results],
    )
