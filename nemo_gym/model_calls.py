"""The per-call record: what one model call cost, as the model server that made it saw it.

A model server (vllm_model, openai_model) adds one record to each Responses reply under `REPLY_FIELD`; the agent
takes it out of the reply (the row's `response` stays as the endpoint shaped it) and lists the records of a
rollout's calls in the row under `nemo_gym.run_format.MODEL_CALLS`. Metrics, the report, the viewer, the collector's
adaptive concurrency and its progress file read them back from there. The names are ours (`_ng_...`), so a row stays
what NeMo Gym's tools read.
"""

import functools
from dataclasses import dataclass, fields
from typing import Any, TypedDict
from urllib.parse import urlsplit, urlunsplit

from nemo_gym.run_format import MODEL_CALLS

# The reply field a model server puts its record under (taken out again by the agent).
REPLY_FIELD = "_ng_model_call"
REPLAYED_FIELD = "replayed"  # ModelCall.replayed, as a record's key


@dataclass
class ModelCall:
    """One model call: the endpoint request that answered it, after any waits and re-sends of that same request."""

    endpoint: str  # base URL of the endpoint, without credentials or query (see `public_endpoint`)
    model: str
    started_at: float  # unix time the model server took the call
    latency_s: float  # the endpoint's time for the request that answered (the last attempt)
    wait_s: float = 0.0  # spent before sending: the endpoint's rate limits and Retry-After pauses
    attempts: int = 1  # requests sent for this call (a 429 is sent again after its Retry-After)
    rate_limited: int = 0  # 429 answers among them
    failure_class: str | None = None  # the class of the last failed attempt (None when the first one answered)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    # USD, set by the collector as it writes the row, from its price table (nemo_gym.pricing); None: no price known
    cost_usd: float | None = None
    # Answered from the replay journal, as an earlier run recorded it (nemo_gym.model_call_replay): not sent again
    replayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        # Every model call makes one: dataclasses.asdict's recursive copy was 4% of a model server's CPU on the
        # stub benchmark (benchmarks/results/cpu_profile.json), for fields that are all scalars.
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Any) -> "ModelCall | None":
        """The record `data` holds, or None when it is not one (a row written by something else)."""
        if not isinstance(data, dict):
            return None
        # A record written by a model server has only our fields; copying it without the others was half the time.
        known = data if _FIELD_NAMES.issuperset(data) else {key: value for key, value in data.items()
                                                             if key in _FIELD_NAMES}
        try:
            return cls(**known)
        except TypeError:
            return None


_FIELD_NAMES = frozenset(field.name for field in fields(ModelCall))


@functools.lru_cache(maxsize=256)  # a server has a few endpoints and names one in every call's record
def public_endpoint(base_url: str) -> str:
    """`base_url` as it may be shown and stored: scheme, host, port and path; never a user, password or query
    (where some gateways take their key)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _detail(usage: dict[str, Any], group: str, name: str) -> int | None:
    details = usage.get(group)
    return _count(details.get(name)) if isinstance(details, dict) else None


class UsageCounts(TypedDict):
    """A call's token counts, as `ModelCall` names them; None where the endpoint reports none."""

    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    reasoning_tokens: int | None


def usage_counts(usage: Any) -> UsageCounts:
    """Token counts of an endpoint's `usage`, in Chat Completions' names (prompt_tokens, completion_tokens and
    their details) or the Responses API's (input_tokens, output_tokens, ...); None where it reports none."""
    if not isinstance(usage, dict):
        return {"input_tokens": None, "output_tokens": None, "cached_tokens": None, "reasoning_tokens": None}
    chat = "prompt_tokens" in usage or "completion_tokens" in usage
    if chat:
        return {"input_tokens": _count(usage.get("prompt_tokens")),
                "output_tokens": _count(usage.get("completion_tokens")),
                "cached_tokens": _detail(usage, "prompt_tokens_details", "cached_tokens"),
                "reasoning_tokens": _detail(usage, "completion_tokens_details", "reasoning_tokens")}
    return {"input_tokens": _count(usage.get("input_tokens")),
            "output_tokens": _count(usage.get("output_tokens")),
            "cached_tokens": _detail(usage, "input_tokens_details", "cached_tokens"),
            "reasoning_tokens": _detail(usage, "output_tokens_details", "reasoning_tokens")}


def calls_of(row: dict[str, Any]) -> list[ModelCall]:
    """The records of a rollout row's model calls, skipping anything that is not one."""
    listed = row.get(MODEL_CALLS)
    if not isinstance(listed, list):
        return []
    return [call for call in map(ModelCall.from_dict, listed) if call is not None]
