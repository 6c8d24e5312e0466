"""The instant weather model of the reliability suite, which also says which sampling seed reached it.

Its final answer ends with `[seed N]` (`[seed none]` without one), so a test reads from each rollout's transcript
whether `num_repeats_add_seed` got through every hop to the Chat Completions request.
"""

import sys
from pathlib import Path
from typing import Any

from starlette.requests import Request

# ng_run loads this file by path in processes whose sys.path need not hold the checkout's `tests` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.reliability.apps.instant_chat import InstantChat  # noqa: E402


class SeedChat(InstantChat):
    async def _chat(self, body: dict[str, Any], request: Request) -> dict[str, Any]:
        completion = await super()._chat(body, request)
        message = completion["choices"][0]["message"]
        if message.get("content"):
            seed = body.get("seed")
            message["content"] += f" [seed {'none' if seed is None else seed}]"
        return completion
