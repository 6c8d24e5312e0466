"""A scripted Responses API model that plays the number-guessing game (loaded through `entrypoint: <this file>`).

The request's `metadata.mode` picks the script (so one server plays them all, through an unchanged agent):
    bisect        binary search over the range named in the first user message, narrowed by every
                  "Higher." / "Lower." observation: solves any game of 1..100 within 7 guesses
    ramble        never names a number
    capped        bisect, but every answer is marked incomplete, as one cut by max_output_tokens
    context_full  guesses once, then answers like vllm_model when the prompt no longer fits: incomplete, no output
The create params it received (all but `input`) come back as JSON in `metadata.params`.
"""

import re
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.protocol import content_to_chat, new_id
from nemo_gym.server.base import BaseServer, json_route

RANGE = re.compile(r"from (-?\d+) to (-?\d+)")


def _texts(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["role"], str(content_to_chat(item.get("content")))) for item in items if "role" in item]


def _bisect(items: list[dict[str, Any]]) -> int:
    texts = _texts(items)
    low, high = map(int, RANGE.search(texts[0][1]).groups())
    guess = (low + high) // 2
    for role, text in texts[1:]:
        if role == "assistant":
            guess = int(re.findall(r"\d+", text)[-1])
        elif text == "Higher.":
            low = guess + 1
        elif text == "Lower.":
            high = guess - 1
    return (low + high) // 2


class GuessingModel(BaseServer):
    def routes(self) -> list[Route]:
        return [json_route("/v1/responses", self._responses)]

    async def _responses(self, params: dict[str, Any], request: Request) -> dict[str, Any]:
        mode = (params.get("metadata") or {}).get("mode", "bisect")
        items = params["input"]
        turns = sum(1 for item in items if item.get("role") == "assistant")
        context_full = mode == "context_full" and turns >= 1
        status = "incomplete" if context_full or mode == "capped" else "completed"
        output = []
        if not context_full:
            text = "I have no idea." if mode == "ramble" else f"My guess is {_bisect(items)}."
            output = [{"type": "message", "id": new_id("msg"), "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]}]
        seen = {key: value for key, value in params.items() if key != "input"}
        return {
            "id": new_id("resp"), "object": "response", "created_at": int(time.time()), "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": "guessing", "output": output, "metadata": {"params": orjson.dumps(seen).decode()},
        }
