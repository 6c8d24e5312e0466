"""Responses API output items and responses, built by hand for verifier tests."""

from typing import Any


def response(*items: dict[str, Any]) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": "completed", "output": list(items)}


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def function_call(arguments: str, name: str = "get_weather") -> dict[str, Any]:
    return {"type": "function_call", "call_id": "call_1", "name": name, "arguments": arguments}
