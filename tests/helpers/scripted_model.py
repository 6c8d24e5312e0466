"""A scripted Responses API model server for agent tests (loaded through `entrypoint: <this file>`).

Setting `mode` picks the script:
    weather      first call: get_weather for the city named in the prompt; once a tool output is in the input:
                 a text answer quoting it
    bad_args     like weather, but the function call's arguments are not valid JSON
    always_call  calls get_weather on every turn, never answers
    fail         answers every request with HTTP 500
The request's session header comes back in `metadata.session_id`.
"""

import re
import time
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.protocol import SESSION_HEADER, new_id
from nemo_gym.server.base import BaseServer, HandlerError, json_route

CITY = re.compile(r"\bin ([A-Z][a-z]+(?: [A-Z][a-z]+)*)")


def _prompt_city(items: list[dict[str, Any]]) -> str:
    for item in items:
        if item.get("role") == "user" and isinstance(item.get("content"), str):
            match = CITY.search(item["content"])
            if match:
                return match.group(1)
    return "Nowhere"


def _function_call(arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call", "id": new_id("fc"), "call_id": new_id("call"),
        "name": "get_weather", "arguments": arguments, "status": "completed",
    }


def _message(text: str) -> dict[str, Any]:
    return {
        "type": "message", "id": new_id("msg"), "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


class ScriptedModel(BaseServer):
    def routes(self) -> list[Route]:
        return [json_route("/v1/responses", self._responses)]

    async def _responses(self, params: dict[str, Any], request: Request) -> dict[str, Any]:
        mode = self.config.get("mode", "weather")
        if mode == "fail":
            raise HandlerError(500, "scripted model failure", "http_5xx")
        items = params["input"]
        tool_outputs = [item["output"] for item in items if item.get("type") == "function_call_output"]
        city = _prompt_city(items)
        if mode == "always_call" or not tool_outputs:
            arguments = "{city: oops" if mode == "bad_args" else f'{{"city": "{city}"}}'
            output = [_function_call(arguments)]
        else:
            output = [_message(f"Here is the weather: {tool_outputs[-1]}")]
        return {
            "id": new_id("resp"), "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": "scripted", "output": output, "metadata": {"session_id": request.headers.get(SESSION_HEADER)},
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
        }
