"""An instant Chat Completions server standing in for vLLM, so benchmarks measure our own overhead.

It plays the weather task perfectly: the first turn calls `get_weather` with the city named in the last user message
("What's the weather in Paris?"), and a turn after a tool result answers in text. Started by ng_run like any server
(`entrypoint: benchmarks/perf/stub_chat.py`); the real `vllm_model` server sits in front of it.
"""

import itertools
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.server.base import BaseServer, HandlerError, json_route

_USAGE = {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}


def _city(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"].rsplit(" in ", 1)[-1].rstrip("?").strip() or "Paris"
    return "Paris"


class StubChatModel(BaseServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ids = itertools.count()

    def routes(self) -> list[Route]:
        return [
            json_route("/v1/chat/completions", self._chat),
            json_route("/v1/models", self._models, methods=("GET",)),
        ]

    async def _models(self, body: Any, request: Request) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "stub", "object": "model"}]}

    async def _chat(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HandlerError(400, "messages must be a non-empty list")
        n = next(self._ids)
        if messages[-1].get("role") == "tool":
            message: dict[str, Any] = {"role": "assistant", "content": "Here is the weather you asked for."}
            finish = "stop"
        else:
            arguments = orjson.dumps({"city": _city(messages)}).decode()
            call = {"id": f"call_{n}", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _USAGE,
        }
