"""An instant Chat Completions server for the reliability suite (loaded by ng_run through `entrypoint:`).

It plays a model that knows the weather task: with no tool result in the conversation it calls `get_weather` for
the city the user asked about; once a tool message is there it answers in text. The weather environment then gives
reward 1. Setting `expected_api_key` makes it answer 401 to any other bearer token, proving the key got through.
"""

import re
import time
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.protocol import new_id
from nemo_gym.server.base import BaseServer, HandlerError, json_route

CITY = re.compile(r"\bin ([A-Z][a-z]+(?: [A-Z][a-z]+)*)")


def _asked_city(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and (match := CITY.search(content)):
            return match.group(1)
    return "Nowhere"


def _assistant_turn(messages: list[dict[str, Any]]) -> dict[str, Any]:
    if any(message.get("role") == "tool" for message in messages):
        return {"role": "assistant", "content": "It is as the tool says."}
    call = {"id": new_id("call"), "type": "function",
            "function": {"name": "get_weather", "arguments": f'{{"city": "{_asked_city(messages)}"}}'}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class InstantChat(BaseServer):
    def routes(self) -> list[Route]:
        return [json_route("/v1/chat/completions", self._chat)]

    async def _chat(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        expected = self.config.get("expected_api_key")
        if expected and request.headers.get("authorization") != f"Bearer {expected}":
            raise HandlerError(401, "wrong or missing api key")
        message = _assistant_turn(body.get("messages") or [])
        return {
            "id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or "instant",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
