"""A Chat Completions model for the viewer's collected runs (loaded by ng_run through `entrypoint:`), behind the
real vllm_model server, so rows carry real Responses API items: reasoning, function calls, tool outputs, text.

Like a checkpoint with known weaknesses, it reads `behaviour_file` (JSON) on every request:
    {"wrong": {"Tokyo": "Kyoto"}, "fail": ["Atlantis"]}
"wrong" cities are looked up as another city (the weather environment then gives reward 0), "fail" cities get
HTTP 400 (a failed rollout). Rewriting the file between two collections makes two runs that differ on known tasks.
"""

import re
import time
from pathlib import Path
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.protocol import new_id
from nemo_gym.server.base import BaseServer, HandlerError, json_route

CITY = re.compile(r"\bin ([A-Z][a-z]+(?: [A-Z][a-z]+)*)")


def _city(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and (match := CITY.search(content)):
            return match.group(1)
    return "Nowhere"


class WeatherChat(BaseServer):
    def routes(self) -> list[Route]:
        return [json_route("/v1/chat/completions", self._chat)]

    async def _chat(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        behaviour = orjson.loads(Path(self.config["behaviour_file"]).read_bytes())
        messages = body.get("messages") or []
        city = _city(messages)
        if city in behaviour.get("fail", []):
            raise HandlerError(400, f"this model cannot answer about {city}")
        if any(message.get("role") == "tool" for message in messages):
            message: dict[str, Any] = {"role": "assistant", "content": f"The weather in {city}: see the tool result."}
        else:
            asked = behaviour.get("wrong", {}).get(city, city)
            call = {"id": new_id("call"), "type": "function",
                    "function": {"name": "get_weather", "arguments": orjson.dumps({"city": asked}).decode()}}
            message = {"role": "assistant", "content": None, "tool_calls": [call],
                       "reasoning_content": f"The user asks about the weather in {city}; I will call get_weather."}
        tokens = 10 + len(city) + 5 * len(messages)
        return {
            "id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or "weather-chat",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 40 + 7 * len(messages), "completion_tokens": tokens,
                      "total_tokens": 40 + 7 * len(messages) + tokens},
        }
