"""A Chat Completions stub for the benchmark tests (loaded by ng_run through `entrypoint:`): a calculator that does
only the first operation it reads in the last user message.

"What is 34 * 27?" gets "918", right; "What is 3 + 4 * 6?" gets "7", the first step only, so every level-4
(two-step) problem of the arithmetic benchmark scores 0 while levels 1-3 score 1: per-level metrics with known
values. No arithmetic in the message: "I do not know."
"""

import re
import time
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.protocol import new_id
from nemo_gym.server.base import BaseServer, json_route

FIRST_STEP = re.compile(r"(\d+)\s*([-+*])\s*(\d+)")
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def first_step(text: str) -> str:
    match = FIRST_STEP.search(text)
    if not match:
        return "I do not know."
    a, op, b = match.groups()
    return str(OPERATIONS[op](int(a), int(b)))


class FirstStepChat(BaseServer):
    def routes(self) -> list[Route]:
        return [json_route("/v1/chat/completions", self._chat)]

    async def _chat(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        users = [m.get("content") for m in body.get("messages") or [] if m.get("role") == "user"]
        answer = first_step(users[-1] if users and isinstance(users[-1], str) else "")
        return {
            "id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or "first-step",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
