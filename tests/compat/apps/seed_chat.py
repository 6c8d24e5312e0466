"""The instant weather model of the reliability suite, which also says which sampling seed reached it.

Its final answer ends with `[seed N]` (`[seed none]` without one), so a test reads from each rollout's transcript
whether `num_repeats_add_seed` got through every hop to the Chat Completions request.
"""

from typing import Any

from starlette.requests import Request

from tests.reliability.apps.instant_chat import InstantChat


class SeedChat(InstantChat):
    async def _chat(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        completion = await super()._chat(body, request)
        message = completion["choices"][0]["message"]
        if message.get("content"):
            seed = body.get("seed")
            message["content"] += f" [seed {'none' if seed is None else seed}]"
        return completion
