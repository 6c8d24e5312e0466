"""Per-request `extra_body` in Responses create params' `metadata`, as NeMo Gym 0.4.0 passes it.

NeMo Gym's params forbid unknown top-level fields, so its collector puts vLLM extras (the per-rollout `seed` of
`num_repeats_add_seed`) into `metadata["extra_body"]`, a JSON object encoded as a string (metadata values are
strings); its vllm_model merges them into the Chat Completions request. Our collector writes the seed there too,
and our vllm_model reads it, so the seed reaches vLLM whichever side runs which part.
"""

import json
from typing import Any

EXTRA_BODY_KEY = "extra_body"


class ExtraBodyError(ValueError):
    """`metadata.extra_body` is not a JSON object encoded as a string."""


def extra_body(params: dict[str, Any]) -> dict[str, Any]:
    """The fields of `params["metadata"]["extra_body"]` ({} when absent)."""
    metadata = params.get("metadata")
    raw = metadata.get(EXTRA_BODY_KEY) if isinstance(metadata, dict) else None
    if raw in (None, ""):
        return {}
    try:
        fields = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise ExtraBodyError(f"metadata.extra_body is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise ExtraBodyError("metadata.extra_body must hold a JSON object")
    return fields


def with_seed(params: dict[str, Any], seed: int, top_level: bool) -> dict[str, Any]:
    """A copy of `params` whose `metadata.extra_body` holds `seed` (NeMo Gym's way) and, when `top_level`, with
    `seed` as a create param too (ours; NeMo Gym's servers reject unknown top-level fields)."""
    metadata = dict(params.get("metadata") or {})
    metadata[EXTRA_BODY_KEY] = json.dumps({**extra_body(params), "seed": seed})
    seeded = {**params, "metadata": metadata}
    if top_level:
        seeded["seed"] = seed
    return seeded
