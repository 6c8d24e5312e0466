"""What the rollout loops need from a generation backend, also from one written for NeMo RL's GenerationInterface.

Our backends declare `supports_async`, expose `pad_token_id`, report `truncated` per sample and honour the
per-sample `max_new_tokens` of the input. A backend written against NeMo RL's interface has none of these: NeMo RL
decides async support from `cfg["vllm_cfg"]["async_engine"]`, pads with the tokenizer's (or `cfg["_pad_token_id"]`),
treats `truncated` as optional, and sends no per-sample cap (its vLLM is limited by `max_model_len` instead). Here
each missing piece is filled the way NeMo RL fills it, and where nothing can stand in for it the backend is
refused with an UnsupportedBackendError that says what to set.
"""

from collections.abc import Mapping
from typing import Any, Optional

import torch

from nemo_gym.experience.batched_data_dict import BatchedDataDict
from nemo_gym.experience.errors import UnsupportedBackendError

_REQUIRED_OUTPUTS = ("output_ids", "generation_lengths", "unpadded_sequence_lengths", "logprobs")


def _cfg(backend: Any) -> Mapping[str, Any]:
    """NeMo RL backends keep their GenerationConfig as `cfg`."""
    cfg = getattr(backend, "cfg", None)
    return cfg if isinstance(cfg, Mapping) else {}


def backend_config(backend: Any) -> Optional[Mapping[str, Any]]:
    """The GenerationConfig a backend generates with: ours keep it as `config`, NeMo RL's as `cfg`; None if neither."""
    config = getattr(backend, "config", None)
    if isinstance(config, Mapping):
        return config
    return _cfg(backend) or None


def supports_async(backend: Any) -> bool:
    """Whether `backend.generate_async` streams (index, one-sample output) pairs: its own `supports_async`, else
    NeMo RL's rule (a `generate_async` method and `cfg.vllm_cfg.async_engine` set)."""
    declared = getattr(backend, "supports_async", None)
    if declared is not None:
        return bool(declared)
    vllm_cfg = _cfg(backend).get("vllm_cfg")
    return (callable(getattr(backend, "generate_async", None)) and isinstance(vllm_cfg, Mapping)
            and bool(vllm_cfg.get("async_engine")))


def require_async_backend(backend: Any) -> None:
    if supports_async(backend):
        return
    name = type(backend).__name__
    if getattr(backend, "supports_async", None) is not None:
        raise UnsupportedBackendError(
            f"{name} has no asynchronous generation path; use run_multi_turn_rollout or an async-capable backend "
            f"(VllmHttpGeneration, HFGeneration)")
    raise UnsupportedBackendError(
        f"{name} does not say whether it generates asynchronously: it has no `supports_async` attribute and its "
        f"cfg does not set vllm_cfg.async_engine (NeMo RL's switch). If its generate_async(data, greedy) yields "
        f"(index, one-sample output) as each sample finishes, set `backend.supports_async = True` (or "
        f"cfg['vllm_cfg']['async_engine'] = True) before building the rollout; otherwise use "
        f"run_multi_turn_rollout, which only calls generate()")


def pad_token_id_of(backend: Any, tokenizer: Any) -> int:
    """The id that pads the backend's inputs and outputs: its own `pad_token_id`, else NeMo RL's
    `cfg["_pad_token_id"]`, else the tokenizer's (what NeMo RL's rollouts pad with)."""
    for candidate in (getattr(backend, "pad_token_id", None), _cfg(backend).get("_pad_token_id"),
                      getattr(tokenizer, "pad_token_id", None)):
        if isinstance(candidate, int):
            return candidate
    raise UnsupportedBackendError(
        f"no pad token id: {type(backend).__name__} has no `pad_token_id` and no cfg['_pad_token_id'], and the "
        f"tokenizer has no pad_token_id; set one of them (NeMo RL's get_tokenizer sets the tokenizer's)")


def _inferred_truncated(outputs: BatchedDataDict[Any], lengths: torch.Tensor, ends: torch.Tensor,
                        allowed: Optional[torch.Tensor], backend: Any, tokenizer: Any) -> torch.Tensor:
    configured = _cfg(backend).get("max_new_tokens")
    eos = getattr(tokenizer, "eos_token_id", None)
    flags = []
    for i in range(int(lengths.shape[0])):
        caps = [int(c) for c in (configured, None if allowed is None else allowed[i]) if c is not None]
        generated = int(lengths[i])
        ended_on_eos = generated > 0 and int(outputs["output_ids"][i, int(ends[i]) - 1]) == eos
        flags.append(bool(caps) and generated >= min(caps) and not ended_on_eos)
    return torch.tensor(flags, dtype=torch.bool)


def conform_outputs(outputs: BatchedDataDict[Any], data: BatchedDataDict[Any], backend: Any,
                    tokenizer: Any) -> BatchedDataDict[Any]:
    """The backend's outputs with `truncated` present and no sample past its per-sample `max_new_tokens`.

    A backend that ignores the cap (NeMo RL's do: they only know `max_model_len`) has its extra tokens cut off —
    the kept ones are still exactly what it generated, with their own log-probs — and the sample marked truncated,
    so a rollout never exceeds its max_seq_len. A backend that reports no `truncated` gets it inferred: the
    generation used all the room it had (its per-sample cap, or the backend's configured max_new_tokens) and did
    not end with the tokenizer's end-of-sequence token.
    """
    missing = [key for key in _REQUIRED_OUTPUTS if key not in outputs]
    if missing:
        raise UnsupportedBackendError(
            f"{type(backend).__name__}.generate returned no {', '.join(missing)} (GenerationOutputSpec needs "
            f"output_ids, generation_lengths, unpadded_sequence_lengths and logprobs)")
    lengths = outputs["generation_lengths"].clone()
    ends = outputs["unpadded_sequence_lengths"].clone()
    allowed = data.get("max_new_tokens")
    if "truncated" in outputs:
        truncated = outputs["truncated"].clone().bool()
    else:
        truncated = _inferred_truncated(outputs, lengths, ends, allowed, backend, tokenizer)
    if allowed is not None:
        over = lengths > allowed.to(lengths.dtype)
        if bool(over.any()):
            ends = torch.where(over, ends - lengths + allowed.to(ends.dtype), ends)
            lengths = torch.where(over, allowed.to(lengths.dtype), lengths)
            truncated = truncated | over
    conformed: BatchedDataDict[Any] = BatchedDataDict(outputs)
    conformed.update(generation_lengths=lengths, unpadded_sequence_lengths=ends, truncated=truncated)
    return conformed
