"""The generation settings of a GenerationConfig and their defaults, defined once.

VllmHttpGeneration, HFGeneration and the agent path (experience/agents/params.py) all read a config through this
module, so one config means one way of generating whichever path runs it:

- sampling: greedy is temperature 0 with top_p 1 and no top_k, whatever the config says; otherwise the config's
  `temperature` (default 1.0), `top_p` (default 1.0) and `top_k` (none unless positive), vLLM's own defaults;
- ends: the model's end-of-turn token, the config's `stop_token_ids`, and stop strings (the config's, then the
  sample's own: samples.merge_stop_strings), a matched stop string kept in the output so text and token ids agree;
- length: at most `max_new_tokens` tokens per generation, never past `max_seq_len` (samples.clamp_max_new_tokens).

`mismatches` says which settings of one config another would not apply: a rollout given a generation config for a
backend built with its own (the trajectory collector's `policy.generation`) checks the two agree.
"""

from dataclasses import dataclass
from typing import Any, Mapping, Optional

DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0
# The request fields that `Sampling` sets: vLLM's names, which the Responses create params share.
SAMPLING_FIELDS = ("temperature", "top_p", "top_k")
# Only a backend applies these, so only its own config can: a rollout cannot send them per request.
BACKEND_ONLY_KEYS = (*SAMPLING_FIELDS, "stop_token_ids")


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen; temperature 0 takes the most likely one."""

    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    top_k: Optional[int] = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def request_fields(self) -> dict[str, Any]:
        """As request fields: `temperature`, `top_p`, and `top_k` when there is one."""
        fields: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p}
        if self.top_k is not None:
            fields["top_k"] = self.top_k
        return fields


GREEDY = Sampling(temperature=0.0, top_p=1.0, top_k=None)


def sampling_of(config: Mapping[str, Any], *, greedy: bool) -> Sampling:
    """The sampling a config asks for (GREEDY when `greedy`)."""
    if greedy:
        return GREEDY
    temperature, top_p, top_k = (config.get(key) for key in SAMPLING_FIELDS)
    return Sampling(
        temperature=DEFAULT_TEMPERATURE if temperature is None else float(temperature),
        top_p=DEFAULT_TOP_P if top_p is None else float(top_p),
        top_k=int(top_k) if top_k is not None and int(top_k) > 0 else None,
    )


def stop_token_ids_of(config: Mapping[str, Any]) -> list[int]:
    """The config's end-of-generation ids besides the model's own end-of-turn token."""
    return [int(token) for token in config.get("stop_token_ids") or ()]


def stop_fields(stop_strings: list[str]) -> dict[str, Any]:
    """Request fields for stop strings: vLLM's `stop`, with the matched string kept in the output."""
    return {"stop": stop_strings, "include_stop_str_in_output": True} if stop_strings else {}


def mismatches(wanted: Mapping[str, Any], applied: Mapping[str, Any]) -> list[str]:
    """Each backend-only setting that `wanted` names and a backend configured with `applied` would not apply, as
    "key: wanted value vs applied value"; `max_new_tokens` too, where `applied` allows fewer tokens."""
    found = []
    wanted_sampling, applied_sampling = sampling_of(wanted, greedy=False), sampling_of(applied, greedy=False)
    for key in SAMPLING_FIELDS:
        if wanted.get(key) is not None and getattr(wanted_sampling, key) != getattr(applied_sampling, key):
            found.append(f"{key}: {getattr(wanted_sampling, key)} vs {getattr(applied_sampling, key)}")
    if wanted.get("stop_token_ids") and set(stop_token_ids_of(wanted)) != set(stop_token_ids_of(applied)):
        found.append(f"stop_token_ids: {stop_token_ids_of(wanted)} vs {stop_token_ids_of(applied)}")
    cap = applied.get("max_new_tokens")
    if wanted.get("max_new_tokens") is not None and cap is not None and int(cap) < int(wanted["max_new_tokens"]):
        found.append(f"max_new_tokens: {wanted['max_new_tokens']} vs {cap}")
    return found
