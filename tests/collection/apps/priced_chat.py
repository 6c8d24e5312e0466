"""A hosted Chat Completions endpoint for the cost tests (loaded by ng_run through `entrypoint:`), behind the real
vllm_model server: every answer reports the same usage, prompt cache included, so every call costs the same under a
known price table. `GET /stats` answers how many completions it served.

Settings: model (the name it serves and lists at GET /v1/models).
"""

import time
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.protocol import new_id
from nemo_gym.server.base import BaseServer, json_route

USAGE = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100,
         "prompt_tokens_details": {"cached_tokens": 400}}


class PricedChat(BaseServer):
    _completions = 0

    def routes(self) -> list[Route]:
        return [json_route("/v1/chat/completions", self._chat), json_route("/v1/models", self._models, ("GET",)),
                json_route("/stats", self._stats, ("GET",))]

    async def _chat(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        PricedChat._completions += 1
        return {"id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
                "model": self.config["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "It is sunny."},
                             "finish_reason": "stop"}],
                "usage": USAGE}

    async def _models(self, body: Any, request: Request) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.config["model"], "object": "model"}]}

    async def _stats(self, body: Any, request: Request) -> dict[str, int]:
        return {"completions": PricedChat._completions}
