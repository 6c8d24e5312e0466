"""Reward 1.0 when the answer in the model's final message equals `expected_answer`, else 0.0.

The answer is the content of the last `\\boxed{...}` in the final message, else the last number in it. Equality is
decided by math_verify (so `1/2`, `0.5` and `\\frac{1}{2}` agree), or by plain numeric comparison where math_verify
cannot parse one side. math_verify is CPU-bound sympy work guarded by SIGALRM timeouts, which only work in a main
thread: it runs in a small process pool, off the event loop, with an outer timeout as a backstop.
"""

import asyncio
import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from math_verify import parse, verify

from nemo_gym.protocol import output_text
from nemo_gym.resources_servers.base import ResourcesServer
from nemo_gym.server.base import HandlerError

BOXED = "\\boxed{"
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


def _last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`, braces matched; None when there is none or it is never closed."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    depth = 1
    for i in range(start + len(BOXED), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + len(BOXED) : i].strip()
    return None


def extract_answer(text: str) -> str | None:
    """The last boxed answer in `text`, else its last number, else None."""
    boxed = _last_boxed(text)
    if boxed:
        return boxed
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else None


def final_message_text(response: dict[str, Any]) -> str:
    """Text of the last message item of a response: earlier messages are intermediate steps, not the answer."""
    messages = [item for item in response.get("output") or [] if item.get("type") == "message"]
    return output_text({"output": messages[-1:]})


def _as_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def answers_match(predicted: str, expected: str) -> bool:
    """math_verify equivalence, or exact numeric equality where math_verify cannot parse either side."""
    gold, pred = parse(f"${expected}$"), parse(f"${predicted}$")
    if gold and pred:
        return verify(gold, pred)
    a, b = _as_number(predicted), _as_number(expected)
    return a is not None and a == b


class MathResourcesServer(ResourcesServer):
    async def startup(self) -> None:
        # spawn, not fork: forking a process that already runs an event loop and sockets is unsafe.
        workers = int(self.config.get("verify_workers", 2))
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        self._verify_timeout_s = float(self.config.get("verify_timeout_s", 30.0))
        # Start and warm every worker (sympy imports take seconds) before the server takes requests.
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._pool, answers_match, "1", "1") for _ in range(workers)))

    async def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        if "expected_answer" not in row:
            raise HandlerError(400, "the row has no 'expected_answer'")
        extracted = extract_answer(final_message_text(response))
        if extracted is None:
            return {"extracted_answer": None, "reward": 0.0}
        check = asyncio.get_running_loop().run_in_executor(
            self._pool, answers_match, extracted, str(row["expected_answer"])
        )
        try:
            correct = await asyncio.wait_for(check, self._verify_timeout_s)
        except asyncio.TimeoutError:
            raise HandlerError(504, f"math_verify took over {self._verify_timeout_s}s", "timeout") from None
        return {"extracted_answer": extracted, "reward": 1.0 if correct else 0.0}
