"""A rollout row as a transcript: the request's messages, then every output item in order (reasoning, assistant
text, tool calls with their arguments, tool results), the verifier's fields and the token counts.

Understands the Responses API items our agents write (message, function_call, function_call_output, reasoning)
and chat-style messages in the request; anything else is shown as its JSON, so nothing in a row is hidden.
"""

from dataclasses import dataclass, field
from typing import Any

import orjson

from nemo_gym.viewer.row_fields import content_text, verifier_fields

FAILURE_FIELDS = ("failure_class", "attempts", "http_status", "last_error")


@dataclass
class Item:
    kind: str  # message, reasoning, tool_call, tool_result, other
    role: str = ""  # message: system, developer, user, assistant
    text: str = ""
    name: str = ""  # tool name (tool_call, and the matching tool_result)
    call_id: str = ""
    part: str = "output"  # "prompt": from the request; "output": what the rollout produced


@dataclass
class Transcript:
    items: list[Item]
    fields: dict[str, Any]  # verifier fields (reward first), or the failure record's fields
    usage: dict[str, Any]
    failed: bool = False
    notes: list[str] = field(default_factory=list)


def _json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def _arguments(raw: Any) -> str:
    """Tool-call arguments pretty-printed when they are JSON; as written otherwise (a model's broken JSON)."""
    if not isinstance(raw, str):
        return _json_text(raw)
    try:
        return _json_text(orjson.loads(raw))
    except orjson.JSONDecodeError:
        return raw


def _reasoning_text(item: dict[str, Any]) -> str:
    texts = [part.get("text", "") for key in ("summary", "content") for part in item.get(key) or []
             if isinstance(part, dict)]
    return "\n".join(t for t in texts if t)


def _item(raw: Any, part: str, call_names: dict[str, str]) -> Item:
    if isinstance(raw, str):
        return Item("message", "user", raw, part=part)
    if not isinstance(raw, dict):
        return Item("other", text=_json_text(raw), part=part)
    kind = raw.get("type")
    if kind == "function_call":
        call_id = str(raw.get("call_id") or raw.get("id") or "")
        call_names[call_id] = str(raw.get("name", ""))
        return Item("tool_call", text=_arguments(raw.get("arguments")), name=str(raw.get("name", "")),
                    call_id=call_id, part=part)
    if kind == "function_call_output":
        call_id = str(raw.get("call_id", ""))
        output = raw.get("output")
        return Item("tool_result", text=output if isinstance(output, str) else _json_text(output),
                    name=call_names.get(call_id, ""), call_id=call_id, part=part)
    if kind == "reasoning":
        return Item("reasoning", "assistant", _reasoning_text(raw), part=part)
    if kind in (None, "message") and "role" in raw:
        return Item("message", str(raw.get("role")), content_text(raw.get("content")), part=part)
    return Item("other", text=_json_text(raw), part=part)


def _usage(response: dict[str, Any]) -> dict[str, Any]:
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return {}
    flat: dict[str, Any] = {}
    for key, value in usage.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": v for inner, v in value.items()})
        else:
            flat[key] = value
    return flat


def transcript(row: dict[str, Any], failed: bool = False) -> Transcript:
    """The transcript of a rollout row, or of a failure record (`failed`): its fields, no messages."""
    if failed:
        fields = {name: row.get(name) for name in FAILURE_FIELDS if name in row}
        return Transcript([], fields, {}, failed=True,
                          notes=["this rollout failed: no transcript was recorded, only the failure"])
    call_names: dict[str, str] = {}
    items: list[Item] = []
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        params = {}
    if isinstance(params.get("instructions"), str) and params["instructions"]:
        items.append(Item("message", "system", params["instructions"], part="prompt"))
    prompt = params.get("input")
    for raw in [prompt] if isinstance(prompt, str) else prompt if isinstance(prompt, list) else []:
        items.append(_item(raw, "prompt", call_names))
    response = row.get("response")
    if not isinstance(response, dict):
        response = {}
    for raw in response.get("output") or []:
        items.append(_item(raw, "output", call_names))
    notes = []
    if response.get("status") not in (None, "completed"):
        notes.append(f"response status: {response.get('status')} "
                     f"{_json_text(response.get('incomplete_details')) if response.get('incomplete_details') else ''}")
    return Transcript(items, verifier_fields(row), _usage(response), notes=notes)
