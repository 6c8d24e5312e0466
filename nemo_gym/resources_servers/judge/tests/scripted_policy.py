"""A scripted policy for the judge tests (a Responses API model server, loaded through `entrypoint: <this file>`): it
answers what the last user message tells it to say, `[say: X]` -> "X" (an empty X is an empty answer), and counts
its calls (`GET /calls`), so a test can tell that re-verification never called it."""

import re
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nemo_gym.protocol import content_to_chat, new_id
from nemo_gym.server.base import BaseServer, json_response, json_route

# The marker ends the message, so what to say may hold brackets ("[say: [[A=B]]]" says "[[A=B]]").
SAY = re.compile(r"\[say: (.*)\]\s*\Z", re.DOTALL)


class ScriptedPolicy(BaseServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def routes(self) -> list[Route]:
        return [json_route("/v1/responses", self._responses), Route("/calls", self._calls, methods=["GET"])]

    async def _calls(self, request: Request) -> Response:
        return json_response({"calls": self.calls})

    async def _responses(self, params: dict[str, Any], request: Request) -> dict[str, Any]:
        self.calls += 1
        users = [item for item in params["input"] if item.get("role") == "user"]
        found = SAY.search(str(content_to_chat(users[-1].get("content"))))
        text = found.group(1) if found else "no idea"
        return {
            "id": new_id("resp"), "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": "scripted-policy", "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
            "output": [{"type": "message", "id": new_id("msg"), "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
        }
