"""What the viewer reads out of one rollout row: reward, tokens, tool calls, the prompt and the final answer.

Rows are the agent's reply (a Responses API object under `response`, verifier fields next to it) with the input
row's fields and the two keys. Anything missing reads as "unknown" (NaN, -1, ""), never as an error: a viewer must
open whatever a run wrote.
"""

import json
import math
import re
from typing import Any

import orjson

from nemo_gym.model_calls import calls_of
from nemo_gym.pricing import rollout_cost

REWARD = "reward"
EXTRACTED_ANSWER = "extracted_answer"
# Fields every row carries for the machinery rather than for the verifier's verdict.
STRUCTURAL_FIELDS = frozenset({"responses_create_params", "response", "agent_ref"})
INTERNAL_PREFIX = "_ng_"
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_row(line: bytes) -> Any:
    """A JSONL line as JSON. A line with broken UTF-8 (bytes that are not UTF-8, or a lone surrogate escape such as
    Python's json module writes) still opens, its broken characters read as U+FFFD, as a browser shows them; a line
    that is not JSON raises orjson.JSONDecodeError."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as error:
        try:
            value = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            raise error from None
        return _replace_surrogates(value)


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replace_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_replace_surrogates(key): _replace_surrogates(item) for key, item in value.items()}
    return value


def cost_of(row: dict[str, Any]) -> float:
    """The rollout's recorded cost in USD (nemo_gym.pricing), NaN when none of its calls has one."""
    usd = rollout_cost(calls_of(row))
    return math.nan if usd is None else usd


def reward_of(row: dict[str, Any]) -> float:
    value = row.get(REWARD)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return math.nan
    return float(value)


def agent_of(row: dict[str, Any]) -> str | None:
    ref = row.get("agent_ref")
    return ref["name"] if isinstance(ref, dict) and isinstance(ref.get("name"), str) else None


def _response(row: dict[str, Any]) -> dict[str, Any]:
    response = row.get("response")
    return response if isinstance(response, dict) else {}


def output_items(row: dict[str, Any]) -> list[dict[str, Any]]:
    items = _response(row).get("output")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def numbers(row: dict[str, Any]) -> tuple[float, int, int, int]:
    """(reward, input tokens, output tokens, tool calls) in one pass over the row: the index build calls this for
    every row."""
    response = row.get("response")
    if not isinstance(response, dict):
        return reward_of(row), -1, -1, 0
    usage = response.get("usage")
    input_tokens = output_tokens = -1
    if isinstance(usage, dict):
        value = usage.get("input_tokens")
        input_tokens = value if type(value) is int else -1
        value = usage.get("output_tokens")
        output_tokens = value if type(value) is int else -1
    calls = 0
    items = response.get("output")
    if type(items) is list:
        for item in items:
            if type(item) is dict and item.get("type") == "function_call":
                calls += 1
    return reward_of(row), input_tokens, output_tokens, calls


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
    return "\n".join(parts)


def prompt_text(row: dict[str, Any]) -> str:
    """The last user message of the request (what a person means by "the prompt")."""
    params = row.get("responses_create_params")
    items = params.get("input") if isinstance(params, dict) else None
    if isinstance(items, str):
        return items
    if not isinstance(items, list):
        return ""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return content_text(item.get("content"))
    return ""


def answer_text(row: dict[str, Any]) -> str:
    """The model's final assistant text (the last message item of the output)."""
    for item in reversed(output_items(row)):
        if item.get("type") == "message":
            return content_text(item.get("content"))
    return ""


def extracted_answer(row: dict[str, Any]) -> str | None:
    value = row.get(EXTRACTED_ANSWER)
    return None if value is None else str(value)


def verifier_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The row's own fields besides the request, the response and the keys: reward and what the verifier added
    (and the input row's extra fields, such as the expected answer)."""
    fields = {REWARD: row[REWARD]} if REWARD in row else {}
    for key, value in row.items():
        if key not in STRUCTURAL_FIELDS and not key.startswith(INTERNAL_PREFIX) and key != REWARD:
            fields[key] = value
    return fields
