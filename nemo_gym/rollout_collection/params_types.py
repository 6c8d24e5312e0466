"""JSON types of the standard Responses API request fields, checked before any rollout is sent.

A wrong type ("temperature": "hot") would otherwise reach the model server and fail every rollout of the run, or
worse, be coerced. Fields outside the standard set pass through unchecked (environments add their own).
"""

from typing import Any, Callable

_Check = tuple[str, Callable[[Any], bool]]


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _is_str(value: Any) -> bool:
    return type(value) is str


def _is_bool(value: Any) -> bool:
    return type(value) is bool


def _is_object(value: Any) -> bool:
    return type(value) is dict


def _one_of(*allowed: str) -> _Check:
    return " or ".join(repr(a) for a in allowed), lambda value: value in allowed


def _list_of(kind: str, check: Callable[[Any], bool]) -> _Check:
    return f"a list of {kind}", lambda value: type(value) is list and all(check(item) for item in value)


# field -> (what it must be, check); null is accepted for every field except where the API has a default.
STANDARD_FIELDS: dict[str, _Check] = {
    "background": ("a boolean", _is_bool),
    "include": _list_of("strings", _is_str),
    "instructions": ("a string", _is_str),
    "max_output_tokens": ("an integer", _is_int),
    "max_tool_calls": ("an integer", _is_int),
    "metadata": ("an object", _is_object),
    "model": ("a string", _is_str),
    "parallel_tool_calls": ("a boolean", _is_bool),
    "previous_response_id": ("a string", _is_str),
    "prompt": ("an object", _is_object),
    "reasoning": ("an object", _is_object),
    "service_tier": _one_of("auto", "default", "flex", "scale", "priority"),
    "store": ("a boolean", _is_bool),
    "stream": ("false", lambda value: value is False),
    "temperature": ("a number", _is_number),
    "text": ("an object", _is_object),
    "tool_choice": ("a string or an object", lambda value: _is_str(value) or _is_object(value)),
    "tools": _list_of("objects", _is_object),
    "top_logprobs": ("an integer", _is_int),
    "top_p": ("a number", _is_number),
    "truncation": _one_of("auto", "disabled"),
    "user": ("a string", _is_str),
}
_NOT_NULL = frozenset({"parallel_tool_calls", "tool_choice", "tools"})


def wrong_field_type(params: dict[str, Any]) -> str | None:
    """'<field> must be <type>, got <value>' for the first standard field of `params` with a wrong type, else None."""
    for name, (expected, check) in STANDARD_FIELDS.items():
        if name not in params:
            continue
        value = params[name]
        if value is None and name not in _NOT_NULL:
            continue
        if not check(value):
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            return f"{name} must be {expected}{'' if name in _NOT_NULL else ' or null'}, got {shown}"
    return None
