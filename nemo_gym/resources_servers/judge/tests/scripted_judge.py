"""A scripted judge for the judge tests (a Responses API model server, loaded through `entrypoint: <this file>`).

It reads prompts made by the tests' template, `Q: {question}\nFIRST<<{first_answer}>>\nSECOND<<{second_answer}>>`,
and says [[A=B]] when the two answers' first words agree once numbers written in words become digits ("four" ->
"4"), else [[A!=B]]. The word in its `state_file` decides how it behaves, so a test can break and mend it while the
stack runs:
    ok      judge every prompt
    faulty  a question holding "[judge: garbage]" gets an answer without a verdict, "[judge: down]" a 503
    hold    a question holding "[judge: hold]" gets no answer until the state changes (a verification in flight)
"""

import asyncio
import re
import string
import time
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from nemo_gym.config.servers import ServerSettings
from nemo_gym.protocol import new_id
from nemo_gym.resources_servers.judge.generate import in_words
from nemo_gym.server.base import BaseServer, HandlerError, json_route

PROMPT = re.compile(r"Q: (.*)\nFIRST<<(.*)>>\nSECOND<<(.*)>>", re.DOTALL)
NUMBERS = {in_words(n): str(n) for n in range(100)}
_PUNCTUATION = str.maketrans({char: " " for char in string.punctuation if char != "-"})


def first_word(answer: str) -> str:
    words = answer.lower().translate(_PUNCTUATION).split()
    return NUMBERS.get(words[0], words[0]) if words else ""


class ScriptedJudgeSettings(ServerSettings):
    state_file: str
    """A file holding ok, faulty or hold."""


class ScriptedJudge(BaseServer):
    Settings = ScriptedJudgeSettings

    def routes(self) -> list[Route]:
        return [json_route("/v1/responses", self._responses)]

    def _state(self) -> str:
        return Path(self.settings.state_file).read_text().strip()

    async def _responses(self, params: dict[str, Any], request: Request) -> dict[str, Any]:
        question, first, second = PROMPT.search(params["input"][-1]["content"]).groups()
        while self._state() == "hold" and "[judge: hold]" in question:
            await asyncio.sleep(0.05)
        faulty = self._state() == "faulty"
        if faulty and "[judge: down]" in question:
            raise HandlerError(503, "the scripted judge is down", "http_5xx")
        if faulty and "[judge: garbage]" in question:
            text = "They look alike to me."
        else:
            text = "[[A=B]]" if first_word(first) == first_word(second) else "[[A!=B]]"
        return {
            "id": new_id("resp"), "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": "scripted-judge",
            "output": [{"type": "message", "id": new_id("msg"), "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
        }
